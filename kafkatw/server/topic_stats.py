"""Per-topic traffic counters of the broker (Kafka's ``BrokerTopicStats``): messages and bytes
in at the append, bytes out when a fetch is answered.

Owns plain numbers only; exporting them (Prometheus names, rates) is ``kafkatw.metrics``' job.
"""

from kafkatw.network.metrics import Counts


class BrokerTopicStats:
    """Counters by topic name; a deleted topic's counters go with it (Kafka's removeMetrics)."""

    def __init__(self):
        # Counts (0 for a topic never counted, as a Counter reads): bumped per append and
        # per answered fetch, where a Counter's += costs twice a dict's
        self.messages_in = Counts()
        self.bytes_in = Counts()
        self.bytes_out = Counts()

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
