"""Model-based test of UnifiedLog: random appends (batch counts, sizes, compression), HW moves,
truncations, DeleteRecords, reopen (clean and unclean) and reads for every isolation and
min_one_message, each compared against an in-memory model of segments, positions and cuts."""

import os
import random

from twisted.trial import unittest

from kafkatw.protocol import errors, records
from kafkatw.protocol.errors import KafkaError
from kafkatw.storage import FetchIsolation, LogConfig, UnifiedLog

from .test_storage_helpers import MsClock, make_batch

SEGMENT_BYTES = 6000


class Model:
    """Segments as {base: bytearray}, batches as [(base, last, seg_base, pos, size)]."""

    def __init__(self):
        self.segs = {0: bytearray()}
        self.batches = []
        self.log_start = 0
        self.hw = 0

    @property
    def active(self):
        return max(self.segs)

    @property
    def leo(self):
        active = self.active
        in_active = [b for b in self.batches if b[2] == active]
        return in_active[-1][1] + 1 if in_active else active

    def append(self, buf):
        if len(self.segs[self.active]) > SEGMENT_BYTES - len(buf):
            self.segs[self.leo] = bytearray()
        seg = self.active
        for p, h in records.iter_batch_headers(bytes(buf)):
            self.batches.append((h.base_offset, h.last_offset, seg, len(self.segs[seg]) + p,
                                 h.size_in_bytes))
        self.segs[seg] += buf

    def batch_for(self, offset):
        for b in self.batches:
            if b[1] >= offset:
                return b
        return None

    def metadata_of(self, offset):
        if offset == self.leo:
            return (self.leo, self.active, len(self.segs[self.active]))
        b = self.batch_for(offset)
        return (offset, b[2], b[3])

    def read(self, start, max_len, limit, min_one):
        if start < self.log_start or start > self.leo:
            return "OOR"
        if start == limit:
            meta = self.metadata_of(limit)
            return (meta, meta[2], 0, False)
        if start > limit:
            meta = self.metadata_of(start)
            return (meta, meta[2], 0, False)
        b = self.batch_for(start)
        _, _, seg, pos, size = b
        lmeta = self.metadata_of(limit)
        max_pos = len(self.segs[seg]) if seg < lmeta[1] else lmeta[2]
        adjusted = max(max_len, size) if min_one else max_len
        if adjusted == 0:
            return ((start, seg, pos), pos, 0, False)
        count = max(0, min(max_pos - pos, adjusted))
        return ((start, seg, pos), pos, count, adjusted < size)

    def truncate_to(self, t):
        if t >= self.leo:
            return
        for base in [b for b in self.segs if b > t]:
            del self.segs[base]
        keep = [b for b in self.batches if b[1] < t]
        self.batches = keep
        seg = self.active
        in_seg = [b for b in keep if b[2] == seg]
        end = in_seg[-1][3] + in_seg[-1][4] if in_seg else 0
        del self.segs[seg][end:]
        self.hw = min(self.hw, self.leo)

    def delete_records_before(self, offset):
        self.log_start = max(self.log_start, offset)

    def delete_start_breach(self):
        bases = sorted(self.segs)
        for i, base in enumerate(bases[:-1]):
            nxt = bases[i + 1]
            if nxt <= self.log_start and nxt <= self.hw:
                del self.segs[base]
                self.batches = [b for b in self.batches if b[2] != base]
            else:
                break


COMPRESSIONS = [0, 0, 1, 2, 3, 4]


class ModelTest(unittest.TestCase):
    def run_model(self, seed, ops=250):
        rnd = random.Random(seed)
        d = self.mktemp()
        os.makedirs(d)
        path = os.path.join(d, "topic-0")
        clock = MsClock()
        config = LogConfig.from_props({}, {"segment.bytes": SEGMENT_BYTES,
                                           "index.interval.bytes": rnd.choice([1, 100, 700])})
        lg = UnifiedLog(path, config, clock=clock)
        model = Model()
        self.addCleanup(lambda: lg.close())
        for step in range(ops):
            op = rnd.random()
            if op < 0.45:
                buf = bytearray()
                for _ in range(rnd.randint(1, 3)):
                    buf += make_batch(rnd.randint(1, 12), rnd.choice([0, 5, 40, 300]),
                                      timestamp=clock.now, compression=rnd.choice(COMPRESSIONS))
                info = lg.append_as_leader(buf, 3)
                self.assertEqual(info.first_offset, model.leo)
                model.append(buf)
                self.assertEqual(info.last_offset + 1, model.leo)
            elif op < 0.55:
                hw = rnd.randint(model.log_start, model.leo)
                self.assertEqual(lg.update_high_watermark(hw), hw)
                model.hw = hw
            elif op < 0.58 and model.leo > model.log_start:
                t = rnd.randint(max(model.log_start, model.hw), model.leo)
                t = self.batch_boundary(model, t)
                lg.truncate_to(t)
                model.truncate_to(t)
            elif op < 0.61:
                o = rnd.randint(model.log_start, model.hw)
                lg.delete_records_before(o)
                model.delete_records_before(o)
                lg.delete_old_segments()
                model.delete_start_breach()
            elif op < 0.63:
                lg.close()
                clean = rnd.random() < 0.5
                lg = UnifiedLog(path, config, clock=clock, recovery_point=0 if not clean else
                                lg.log_end_offset, log_start_offset=model.log_start,
                                high_watermark=model.hw, needs_recovery=not clean)
            else:
                self.check_reads(rnd, lg, model)
            self.check_state(lg, model)

    def batch_boundary(self, model, t):
        for b in model.batches:
            if b[0] <= t <= b[1]:
                return b[0]
        return t

    def check_state(self, lg, model):
        self.assertEqual(lg.log_end_offset, model.leo)
        self.assertEqual(lg.log_start_offset, model.log_start)
        self.assertEqual(lg.high_watermark, model.hw)
        # no open transaction in the model: the LSO is the HW
        self.assertEqual(lg.fetch_offset_snapshot(), (model.log_start, model.hw, model.hw))
        self.assertEqual([(s.base_offset, s.size) for s in lg.segments],
                         [(b, len(model.segs[b])) for b in sorted(model.segs)])
        meta = lg.log_end_offset_metadata
        self.assertEqual((meta.message_offset, meta.segment_base_offset,
                          meta.relative_position_in_segment), model.metadata_of(model.leo))

    def check_reads(self, rnd, lg, model):
        for _ in range(4):
            start = rnd.randint(model.log_start - 1, model.leo + 1)
            max_len = rnd.choice([0, 1, 60, 500, 3000, 100000])
            for iso, limit in ((FetchIsolation.LOG_END, model.leo),
                               (FetchIsolation.HIGH_WATERMARK, model.hw),
                               (FetchIsolation.TXN_COMMITTED, model.hw)):
                for min_one in (False, True):
                    expected = model.read(start, max_len, limit, min_one)
                    if expected == "OOR":
                        with self.assertRaises(KafkaError) as cm:
                            lg.read(start, max_len, iso, min_one)
                        self.assertEqual(cm.exception.code, errors.OFFSET_OUT_OF_RANGE)
                        continue
                    info = lg.read(start, max_len, iso, min_one)
                    m = info.fetch_offset_metadata
                    got = ((m.message_offset, m.segment_base_offset,
                            m.relative_position_in_segment),
                           info.records.position, info.records.count,
                           info.first_entry_incomplete)
                    self.assertEqual(got, expected, (start, max_len, iso, min_one))
                    seg = m.segment_base_offset
                    self.assertEqual(info.records.read(),
                                     bytes(model.segs[seg][got[1]:got[1] + got[2]]))

    def test_seed_1(self):
        self.run_model(1)

    def test_seed_2(self):
        self.run_model(2)

    def test_seed_3(self):
        self.run_model(3)

    def test_seed_4(self):
        self.run_model(4)
