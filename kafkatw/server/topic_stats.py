"""Per-topic traffic counters of the broker (Kafka's ``BrokerTopicStats``): messages and bytes
in at the append, bytes out when a fetch is answered.

Owns plain numbers only; exporting them (Prometheus names, rates) is ``kafkatw.metrics``' job.
"""

from kafkatw.network.metrics import Counts

MESSAGES_IN, BYTES_IN, BYTES_OUT = 0, 1, 2


class BrokerTopicStats:
    """Counters by topic name; a deleted topic's counters go with it (Kafka's removeMetrics)."""

    def __init__(self):
        # topic -> [messages in, bytes in, bytes out]: an append or an answered fetch finds
        # its topic's list with one dict look-up and bumps list items (a ``Counts`` item's
        # += is a dict subclass's read and write, ~1k instructions each); the per-counter
        # views below are made when something reads them
        self._counts = {}

    def record_append(self, topic, messages, nbytes):
        counts = self._counts.get(topic)
        if counts is None:
            counts = self._counts[topic] = [0, 0, 0]
        counts[MESSAGES_IN] += messages
        counts[BYTES_IN] += nbytes

    def record_fetch(self, results):
        """``results``: [((topic, partition), FetchPartitionData)] about to be answered."""
        all_counts = self._counts
        for tp, r in results:
            size = r.records_size
            if size:
                counts = all_counts.get(tp[0])
                if counts is None:
                    counts = all_counts[tp[0]] = [0, 0, 0]
                counts[BYTES_OUT] += size

    def _view(self, which):
        return Counts((topic, counts[which]) for topic, counts in self._counts.items() if counts[which])

    @property
    def messages_in(self):
        """``{topic: messages appended}`` now (a copy; 0 for a topic never counted)."""
        return self._view(MESSAGES_IN)

    @property
    def bytes_in(self):
        """``{topic: bytes appended}`` now (a copy; 0 for a topic never counted)."""
        return self._view(BYTES_IN)

    @property
    def bytes_out(self):
        """``{topic: record bytes answered to fetches}`` now (a copy; 0 for a topic never
        counted)."""
        return self._view(BYTES_OUT)

    def remove(self, topic):
        self._counts.pop(topic, None)
