"""Per-topic traffic counters of the broker (Kafka's ``BrokerTopicStats``): messages and bytes
in at the append, bytes out when a fetch is answered.

Owns plain numbers only; exporting them (Prometheus names, rates) is ``kafkatw.metrics``' job.
"""

import collections


class BrokerTopicStats:
    """Counters by topic name; a deleted topic's counters go with it (Kafka's removeMetrics)."""

    def __init__(self):
        self.messages_in = collections.Counter()
        self.bytes_in = collections.Counter()
        self.bytes_out = collections.Counter()

    def record_append(self, topic, messages, nbytes):
        self.messages_in[topic] += messages
        self.bytes_in[topic] += nbytes

    def record_fetch(self, results):
        """``results``: [((topic, partition), FetchPartitionData)] about to be answered."""
        bytes_out = self.bytes_out
        for tp, r in results:
            size = r.records_size
            if size:
                bytes_out[tp[0]] += size

    def remove(self, topic):
        for counter in (self.messages_in, self.bytes_in, self.bytes_out):
            counter.pop(topic, None)
