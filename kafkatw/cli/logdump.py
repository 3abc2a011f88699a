"""``kafkatw log dump PATH...``: Kafka's DumpLogSegments for segment files read straight from
disk (no broker): batches with offsets, positions, CRC validity, producer ids and control
markers, optional record payloads, and a sanity check of the segment's offset and time indexes.
"""

import os
import struct

from kafkatw.cli.client import ClientError
from kafkatw.cli.output import wants_json, write_json
from kafkatw.protocol import records as rec_mod
from kafkatw.protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    CorruptRecordError,
    decode_batch,
    decode_control_record,
    read_batch_header,
    verify_crc,
)

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


def add_parser(sub):
    p = sub.add_parser("log", help="inspect log segment files on disk")
    lsub = p.add_subparsers(dest="action", metavar="ACTION")
    lsub.required = True
    q = lsub.add_parser("dump", help="print the batches of .log files (and check .index/.timeindex)")
    q.add_argument("paths", nargs="+", metavar="PATH", help=".log, .index or .timeindex file(s)")
    q.add_argument("--print-data-log", action="store_true", help="print every record and its payload")
    q.add_argument("--no-index-check", action="store_true", help="skip the index sanity check")
    q.set_defaults(func=cmd_dump, needs_client=False)


def _base_offset(path):
    name = os.path.basename(path).split(".")[0]
    return int(name) if name.isdigit() else 0


def _ts_name(header):
    return "LogAppendTime" if header.timestamp_type == rec_mod.LOG_APPEND_TIME else "CreateTime"


def _payload(b):
    return "null" if b is None else bytes(b).decode("utf-8", "replace")


def scan_log(data):
    """[(position, BatchHeader, crc valid)] and the position where reading stopped."""
    out = []
    pos = 0
    while pos + LOG_OVERHEAD <= len(data):
        if pos + BATCH_HEADER_SIZE > len(data):
            break
        try:
            header = read_batch_header(data, pos)
        except (CorruptRecordError, ValueError, struct.error):
            break
        if header.batch_length <= 0 or pos + header.size_in_bytes > len(data):
            break
        valid = header.magic == 2 and verify_crc(data, pos, header)
        out.append((pos, header, valid))
        pos += header.size_in_bytes
    return out, pos


def dump_log(path, args, out):
    with open(path, "rb") as f:
        data = f.read()
    out.write("Dumping %s\n" % path)
    out.write("Log starting offset: %d\n" % _base_offset(path))
    batches, end = scan_log(data)
    problems = 0
    for pos, h, valid in batches:
        if not valid:
            problems += 1
        out.write(
            "baseOffset: %d lastOffset: %d count: %d baseSequence: %d lastSequence: %d producerId: %d "
            "producerEpoch: %d partitionLeaderEpoch: %d isTransactional: %s isControl: %s "
            "deleteHorizonMs: %s position: %d %s: %d size: %d magic: %d compresscodec: %s crc: %d "
            "isvalid: %s\n" % (
                h.base_offset, h.last_offset, h.records_count, h.base_sequence, h.last_sequence,
                h.producer_id, h.producer_epoch, h.partition_leader_epoch,
                str(h.is_transactional).lower(), str(h.is_control).lower(),
                ("OptionalLong[%d]" % h.delete_horizon_ms) if h.has_delete_horizon else "OptionalLong.empty",
                pos, _ts_name(h), h.max_timestamp, h.size_in_bytes, h.magic,
                CODEC_NAMES.get(h.compression, str(h.compression)), h.crc, str(valid).lower()))
        if (args.print_data_log or h.is_control) and valid:
            try:
                _, recs = decode_batch(data, pos)
            except CorruptRecordError as e:
                out.write("| cannot decode records: %s\n" % e)
                problems += 1
                continue
            for r in recs:
                seq = -1 if h.base_sequence < 0 else (h.base_sequence + r.offset - h.base_offset) & 0x7FFFFFFF
                line = "| offset: %d %s: %d keySize: %d valueSize: %d sequence: %d headerKeys: [%s]" % (
                    r.offset, _ts_name(h), r.timestamp, -1 if r.key is None else len(r.key),
                    -1 if r.value is None else len(r.value), seq,
                    ",".join(_payload(k) if not isinstance(k, str) else k for k, _ in r.headers))
                if h.is_control:
                    try:
                        c = decode_control_record(r)
                        kind = {0: "ABORT", 1: "COMMIT"}.get(c.type, "UNKNOWN(%d)" % c.type)
                        line += " endTxnMarker: %s coordinatorEpoch: %s" % (kind, c.coordinator_epoch)
                    except Exception as e:  # a malformed marker is reported, not fatal
                        line += " controlRecord: invalid (%s)" % e
                elif args.print_data_log:
                    if r.key is not None:
                        line += " key: %s" % _payload(r.key)
                    line += " payload: %s" % _payload(r.value)
                out.write(line + "\n")
    if end < len(data):
        out.write("Found %d invalid bytes at the end of %s (position %d)\n"
                  % (len(data) - end, os.path.basename(path), end))
        problems += 1
    if not args.no_index_check:
        problems += check_indexes(path, batches, out)
    return problems


def log_json(path, args):
    """One segment file as a JSON object: its batches (Kafka's DumpLogSegments fields), their
    records with ``--print-data-log`` (control records always), and the problem count."""
    with open(path, "rb") as f:
        data = f.read()
    batches, end = scan_log(data)
    problems = sum(1 for _, _, valid in batches if not valid) + (1 if end < len(data) else 0)
    out = []
    for pos, h, valid in batches:
        batch = {"baseOffset": h.base_offset, "lastOffset": h.last_offset, "count": h.records_count,
                 "baseSequence": h.base_sequence, "lastSequence": h.last_sequence, "producerId": h.producer_id,
                 "producerEpoch": h.producer_epoch, "partitionLeaderEpoch": h.partition_leader_epoch,
                 "isTransactional": h.is_transactional, "isControl": h.is_control, "position": pos,
                 "timestampType": _ts_name(h), "maxTimestamp": h.max_timestamp, "size": h.size_in_bytes,
                 "magic": h.magic, "compressCodec": CODEC_NAMES.get(h.compression, str(h.compression)),
                 "crc": h.crc, "isValid": valid}
        if (args.print_data_log or h.is_control) and valid:
            try:
                _, recs = decode_batch(data, pos)
            except CorruptRecordError:
                problems += 1
                recs = []
            batch["records"] = [_record_json(h, r, args.print_data_log) for r in recs]
        out.append(batch)
    if not args.no_index_check:
        problems += check_indexes(path, batches, _Discard())
    return {"file": path, "baseOffset": _base_offset(path), "batches": out,
            "invalidBytesAtEnd": len(data) - end, "problems": problems}


def _record_json(h, r, with_data):
    record = {"offset": r.offset, "timestamp": r.timestamp,
              "keySize": -1 if r.key is None else len(r.key),
              "valueSize": -1 if r.value is None else len(r.value),
              "headerKeys": [_payload(k) if not isinstance(k, str) else k for k, _ in r.headers]}
    if h.is_control:
        try:
            c = decode_control_record(r)
            record["endTxnMarker"] = {0: "ABORT", 1: "COMMIT"}.get(c.type, "UNKNOWN(%d)" % c.type)
            record["coordinatorEpoch"] = c.coordinator_epoch
        except Exception:  # a malformed marker is reported, not fatal
            record["endTxnMarker"] = None
    elif with_data:
        record["key"] = None if r.key is None else _payload(r.key)
        record["payload"] = None if r.value is None else _payload(r.value)
    return record


class _Discard:
    def write(self, text):
        pass


def _entries(path, entry):
    with open(path, "rb") as f:
        data = f.read()
    rows = []
    for i in range(len(data) // entry.size):
        row = entry.unpack_from(data, i * entry.size)
        if i > 0 and not any(row):
            break  # preallocated tail of an active segment's index
        rows.append(row)
    return rows


def check_indexes(log_path, batches, out):
    """Check the sibling .index and .timeindex against the batches; returns the problem count."""
    base = _base_offset(log_path)
    stem = log_path[:-len(".log")]
    problems = 0
    by_pos = {pos: h for pos, h, _ in batches}
    last = batches[-1][1].last_offset if batches else base - 1
    index_path = stem + ".index"
    if os.path.exists(index_path):
        entries = [e for e in _entries(index_path, _OFFSET_ENTRY)]
        if not batches:
            entries = [e for e in entries if any(e)]
        prev = -1
        bad = 0
        for rel, position in entries:
            offset = base + rel
            h = by_pos.get(position)
            if h is None or not h.base_offset <= offset <= h.last_offset or offset <= prev:
                bad += 1
                out.write("Index mismatch in %s: offset %d -> position %d does not point to its batch\n"
                          % (os.path.basename(index_path), offset, position))
            prev = offset
        out.write("Offset index %s: %d entries, %s\n"
                  % (os.path.basename(index_path), len(entries), "OK" if not bad else "%d bad" % bad))
        problems += bad
    time_path = stem + ".timeindex"
    if os.path.exists(time_path):
        entries = [e for e in _entries(time_path, _TIME_ENTRY)]
        if not batches:
            entries = [e for e in entries if any(e)]
        bad = 0
        prev_ts, prev_off = -1, -1
        for ts, rel in entries:
            offset = base + rel
            if ts < prev_ts or offset < prev_off or offset > last:
                bad += 1
                out.write("Time index mismatch in %s: timestamp %d -> offset %d\n"
                          % (os.path.basename(time_path), ts, offset))
            prev_ts, prev_off = ts, offset
        out.write("Time index %s: %d entries, %s\n"
                  % (os.path.basename(time_path), len(entries), "OK" if not bad else "%d bad" % bad))
        problems += bad
    return problems


def dump_index(path, out):
    base = _base_offset(path)
    out.write("Dumping %s\n" % path)
    if path.endswith(".timeindex"):
        for ts, rel in _entries(path, _TIME_ENTRY):
            out.write("timestamp: %d offset: %d\n" % (ts, base + rel))
    else:
        for rel, position in _entries(path, _OFFSET_ENTRY):
            out.write("offset: %d position: %d\n" % (base + rel, position))
    return 0


def cmd_dump(client, args):
    problems = 0
    dumped = []
    for path in args.paths:
        if not os.path.isfile(path):
            raise ClientError("no such file: %s" % path)
        try:
            if wants_json(args):
                if not path.endswith(".log"):
                    raise ClientError("%s: --output json dumps .log files only" % path)
                dumped.append(log_json(path, args))
                problems += dumped[-1]["problems"]
            elif path.endswith(".log"):
                problems += dump_log(path, args, args.out)
            elif path.endswith((".index", ".timeindex")):
                problems += dump_index(path, args.out)
            else:
                raise ClientError("%s: not a .log, .index or .timeindex file" % path)
        except OSError as e:
            raise ClientError("cannot read %s: %s" % (path, e.strerror))
    if dumped:
        write_json(args.out, dumped)
    if problems:
        raise ClientError("%d problem(s) found" % problems)
    return 0
