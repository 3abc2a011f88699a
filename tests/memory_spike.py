"""Where a broker's RSS goes after a spike of partitions is gone (issue 26, docs/reliability.md):
creates topics of thousands of partitions (what one fuzzed CreateTopics can ask for), asks
Metadata for them at three versions, deletes them, and prints the broker's memory
(``tests/memhook/malloc_stats.py``) after each round. Run the broker's allocator variants by
environment, e.g. ``PYTHONMALLOC=malloc`` or ``MALLOC_ARENA_MAX=1``::

    .venv/bin/python -m tests.memory_spike --rounds 2 --topics 2 --partitions 3000
"""

import argparse
import json
import os
import tempfile
import time

from kafkatw.protocol import messages as m
from kafkatw.testing import KafkaBroker
from tests import wire_fuzz
from tests.support import RawClient, rss_kb


def spike(broker, names, partitions):
    c = RawClient(broker, "memory-spike", timeout=120)
    try:
        R = m.CreateTopicsRequest
        body = c.request(19, 5, R(topics=[R.CreatableTopic(
            name=n, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])
            for n in names], timeout_ms=120000))
        if any(t.error_code for t in body.topics):
            raise AssertionError("CreateTopics: %r" % body)
        T = m.MetadataRequest.MetadataRequestTopic
        for version in (4, 9, 12):
            topics = [T(name=n, topic_id=bytes(16)) if version >= 10 else T(name=n) for n in names]
            c.request(3, version, m.MetadataRequest(topics=topics))
    finally:
        c.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--topics", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=3000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memory-spike-") as directory:
        probe = wire_fuzz.MallocProbe(directory)
        os.environ.update(probe.environ())
        with KafkaBroker(overrides=wire_fuzz.BROKER_PROPS) as broker:
            pid = broker.process.pid
            wire_fuzz.internal_topics(broker)
            time.sleep(1)
            print(json.dumps({"at": "start", **probe.stats(pid)}))
            for r in range(args.rounds):
                spike(broker, ["spike-%d-%d" % (r, i) for i in range(args.topics)], args.partitions)
                created = rss_kb(pid)
                wire_fuzz.clean_up(broker)
                time.sleep(2)
                print(json.dumps({"at": "round %d deleted" % (r + 1), "rss_kb_created": created,
                                  **probe.stats(pid)}))


if __name__ == "__main__":
    main()
