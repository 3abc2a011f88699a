"""Record the requests real clients send, as the seed corpus of the request fuzzers.

Runs a throwaway broker behind a recording TCP proxy and drives confluent-kafka (admin,
producer with every codec, idempotent producer, consumer group with commits) and kafka-python
through it, then keeps up to ``--per-version`` distinct frames per (API key, version) in
``tests/corpus/client_requests.bin``: each frame as a 4-byte big-endian length and the frame
(request header and body, no size prefix). Regenerate with::

    .venv/bin/python tools/capture_corpus.py
"""

import argparse
import os
import socket
import struct
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kafkatw.testing import KafkaBroker  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   "tests", "corpus", "client_requests.bin")


class RecordingProxy:
    """Forwards loopback connections to the broker; keeps every client->broker frame."""

    def __init__(self, target):
        self.target = target
        self.frames = []
        self.lock = threading.Lock()
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._client_to_broker, args=(client, upstream),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _client_to_broker(self, src, dst):
        buf = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                buf += data
                while len(buf) >= 4:
                    (size,) = struct.unpack(">i", buf[:4])
                    if len(buf) < 4 + size:
                        break
                    with self.lock:
                        self.frames.append(buf[4:4 + size])
                    buf = buf[4 + size:]
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    @staticmethod
    def _pipe(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass


def drive_clients(bootstrap):
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    common = {"bootstrap.servers": bootstrap, "broker.address.family": "v4"}
    admin = AdminClient(common)
    for f in admin.create_topics([NewTopic("corpus-a", 3, 1),
                                  NewTopic("corpus-c", 1, 1, config={"cleanup.policy": "compact"}),
                                  NewTopic("corpus-gone", 1, 1)]).values():
        f.result(30)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = confluent_kafka.Producer(dict(common, **{"compression.type": codec, "linger.ms": 5,
                                                     "enable.idempotence": codec == "zstd"}))
        for i in range(50):
            p.produce("corpus-a", key=b"k%d" % (i % 7), value=b"%s-%d" % (codec.encode(), i),
                      headers=[("h", b"v")] if i % 5 == 0 else None)
            p.produce("corpus-c", key=b"k%d" % (i % 3), value=b"v%d" % i)
        p.flush(30)
    c = confluent_kafka.Consumer(dict(common, **{"group.id": "corpus-g", "auto.offset.reset": "earliest",
                                                 "enable.auto.commit": False}))
    c.subscribe(["corpus-a"])
    got = 0
    for _ in range(200):
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            got += 1
            if got % 20 == 0:
                c.commit(asynchronous=False)
        if got >= 250:
            break
    c.close()
    for f in admin.describe_configs([confluent_kafka.admin.ConfigResource("topic", "corpus-a")]).values():
        f.result(30)
    for f in admin.create_partitions([NewPartitions("corpus-a", 4)]).values():
        f.result(30)
    admin.list_consumer_groups().result(30)
    for f in admin.describe_consumer_groups(["corpus-g"]).values():
        f.result(30)
    for f in admin.delete_topics(["corpus-gone"]).values():
        f.result(30)

    import kafka
    kp = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(20):
        kp.send("corpus-a", key=b"kp", value=b"kafka-python-%d" % i)
    kp.flush(30)
    kp.close()
    kc = kafka.KafkaConsumer("corpus-a", bootstrap_servers=bootstrap, group_id="corpus-kp",
                             auto_offset_reset="earliest", consumer_timeout_ms=3000)
    for n, _ in enumerate(kc):
        if n >= 50:
            break
    kc.commit()
    kc.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-version", type=int, default=6)
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args(argv)
    with KafkaBroker() as broker:
        proxy = RecordingProxy((broker.host, broker.port))
        # clients reach the broker's advertised address after bootstrap: advertise the proxy
        broker.overrides["advertised.listeners"] = "PLAINTEXT://127.0.0.1:%d" % proxy.port
        broker.restart()
        drive_clients("127.0.0.1:%d" % proxy.port)
    kept = {}
    for frame in proxy.frames:
        api_key, version = struct.unpack(">hh", frame[:4])
        seen = kept.setdefault((api_key, version), [])
        body = frame[8:]  # without the correlation id
        if len(seen) < args.per_version and all(f[8:] != body for f in seen):
            seen.append(frame)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "wb") as f:
        for key in sorted(kept):
            for frame in kept[key]:
                f.write(struct.pack(">i", len(frame)) + frame)
    total = sum(len(v) for v in kept.values())
    print("%d frames of %d (api, version) pairs from %d captured -> %s"
          % (total, len(kept), len(proxy.frames), args.out))


if __name__ == "__main__":
    main()
