"""Helpers for the storage tests: batch builders and a fake clock in milliseconds."""

from kafkatw.protocol.records import Record, build_batch


def make_batch(n_records=1, value_size=10, timestamp=1000, compression=0, key=None,
               keys=None, values=None):
    recs = []
    for i in range(n_records):
        k = keys[i] if keys is not None else key
        v = values[i] if values is not None else bytes([65 + i % 26]) * value_size
        recs.append(Record(key=k, value=v, timestamp=timestamp))
    return bytearray(build_batch(recs, compression=compression))


class MsClock:
    def __init__(self, now=1_000_000):
        self.now = now

    def __call__(self):
        return self.now
