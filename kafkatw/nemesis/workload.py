"""The nemesis' workload: idempotent acks=all confluent-kafka producers writing numbered values
and read_committed consumers reading them back live, each in its own thread. It records what
was acknowledged and what was seen; judging it is the checker's job."""

import logging
import threading
import time

#: a value is ``b"<producer>-<sequence>"``: unique per run, ordered per producer.
VALUE_FORMAT = b"%d-%d"


def parse_value(value):
    """``(producer, sequence)`` of a workload value, or None for anything else."""
    try:
        producer, seq = value.split(b"-", 1)
        return int(producer), int(seq)
    except (AttributeError, ValueError):
        return None


def _file_logger(index, path):
    """A logger of its own (not registered with ``logging``, not propagated) writing one
    producer's client log to ``path``, opened on its first line."""
    logger = logging.Logger("nemesis-producer-%d" % index, logging.DEBUG)
    handler = logging.FileHandler(path, delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    return logger


class ProducerWorker(threading.Thread):
    """One idempotent producer: ``rate`` values a second, spread round-robin over the partitions.

    ``acked`` lists ``(partition, offset, value)`` of every delivery reported without an error;
    ``failed`` lists ``(value, error)`` of the others (a failed record may still be in the log:
    that is not a loss, and a later copy of it is not a duplicate the producer could avoid).
    """

    def __init__(self, index, bootstrap, topic, partitions, rate, config=None, log_path=None):
        super().__init__(name="nemesis-producer-%d" % index, daemon=True)
        self.index = index
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.acked = []
        self.failed = []
        self.sent = 0
        self._halt = threading.Event()
        self._log = None
        conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                "linger.ms": 5, "message.timeout.ms": 300000, "retry.backoff.ms": 100,
                "client.id": "nemesis-producer-%d" % index, "log_level": 2}
        if log_path is not None:
            # librdkafka's own account of every send, error, drain and epoch bump: what a
            # finding is explained from (a few thousand lines per minute)
            self._log = _file_logger(index, log_path)
            conf.update({"debug": "eos,msg", "log_level": 7, "logger": self._log})
        conf.update(config or {})
        self.conf = conf
        self.producer = None

    def _delivered(self, err, msg):
        if err is None:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            self.failed.append((msg.value(), str(err)))

    def run(self):
        from confluent_kafka import Producer

        self.producer = Producer(self.conf)
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._halt.is_set():
            value = VALUE_FORMAT % (self.index, self.sent)
            try:
                self.producer.produce(self.topic, value=value, partition=self.sent % self.partitions,
                                      on_delivery=self._delivered)
            except BufferError:
                self.producer.poll(0.1)
                continue
            self.sent += 1
            next_at += interval
            self.producer.poll(max(0.0, next_at - time.monotonic()))

    def stop(self, flush_timeout_s):
        """Stop producing and wait for the outstanding deliveries; returns how many are left."""
        self._halt.set()
        self.join(30)
        left = 0 if self.producer is None else self.producer.flush(flush_timeout_s)
        for handler in list(self._log.handlers) if self._log is not None else ():
            self._log.removeHandler(handler)
            handler.close()
        return left


class ConsumerWorker(threading.Thread):
    """One read_committed consumer assigned every partition from the start (no group: the
    cluster's group coordinator is single-node so far). ``seen`` maps a partition to the
    ``(offset, value)`` it delivered, in delivery order."""

    def __init__(self, index, bootstrap, topic, partitions, config=None):
        super().__init__(name="nemesis-consumer-%d" % index, daemon=True)
        self.topic = topic
        self.partitions = partitions
        self.seen = {p: [] for p in range(partitions)}
        self.errors = []
        self._halt = threading.Event()
        self._log = None
        conf = {"bootstrap.servers": bootstrap, "group.id": "nemesis-consumer-%d" % index,
                "enable.auto.commit": False, "isolation.level": "read_committed",
                "auto.offset.reset": "earliest", "client.id": "nemesis-consumer-%d" % index,
                "log_level": 2}
        conf.update(config or {})
        self.conf = conf

    def run(self):
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(self.conf)
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
        try:
            while not self._halt.is_set():
                for m in consumer.consume(500, 0.2):
                    if m.error():
                        self.errors.append(str(m.error()))
                    else:
                        self.seen[m.partition()].append((m.offset(), m.value()))
        finally:
            consumer.close()

    def stop(self):
        self._halt.set()
        self.join(30)


def read_back(bootstrap, topic, partitions, timeout_s=60.0):
    """Every record of the topic, read_committed from offset 0 up to each partition's high
    watermark at the start: ``{partition: [(offset, value)]}``. Raises AssertionError when the
    read does not reach the end within ``timeout_s``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "nemesis-checker",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "client.id": "nemesis-checker",
                         "log_level": 2})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout_s
        done = {p for p in range(partitions) if ends[p] == 0}
        while len(done) < partitions:
            if time.monotonic() > deadline:
                raise AssertionError("reading back %s timed out: at %s of ends %s" % (
                    topic, {p: (out[p][-1][0] + 1 if out[p] else 0) for p in out}, ends))
            for m in consumer.consume(1000, 0.5):
                if m.error():
                    continue
                p = m.partition()
                if m.offset() < ends[p]:
                    out[p].append((m.offset(), m.value()))
                if m.offset() + 1 >= ends[p]:
                    done.add(p)
            # transaction markers or aborted records may end the range without a record
            for p in range(partitions):
                if p not in done:
                    position = consumer.position([TopicPartition(topic, p)])[0].offset
                    if position >= ends[p]:
                        done.add(p)
        return out, ends
    finally:
        consumer.close()
