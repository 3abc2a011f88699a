"""``python -m kafkatw.nemesis``: one fault-injection run by hand; prints its report and exits 1
when anything was lost, duplicated, reordered or divergent."""

import argparse
import sys

from kafkatw.nemesis import run, schedule


def _range(text):
    lo, sep, hi = text.partition(",")
    return (float(lo), float(hi if sep else lo))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m kafkatw.nemesis", description=__doc__)
    parser.add_argument("--seed", type=int, default=1, help="the schedule's seed (a run replays from it)")
    parser.add_argument("--faults", type=int, help="how many faults (else --duration decides)")
    parser.add_argument("--duration", type=float, default=None,
                        help="seconds of faults (their holds and rests; recovery waits come on top)")
    parser.add_argument("--kinds", default=",".join(schedule.KINDS),
                        help="comma-separated faults to draw from: %s" % ", ".join(schedule.KINDS))
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=1)
    parser.add_argument("--rate", type=int, default=100, help="values per second per producer")
    parser.add_argument("--hold", type=_range, default=(1.0, 3.0), metavar="LO,HI",
                        help="seconds a fault lasts, drawn in [LO, HI]")
    parser.add_argument("--rest", type=_range, default=(2.0, 4.0), metavar="LO,HI",
                        help="seconds of quiet after a fault heals, drawn in [LO, HI]")
    parser.add_argument("--session-timeout-ms", type=int, default=4000)
    parser.add_argument("--keep-data", action="store_true", help="keep the cluster's folder for inspection")
    args = parser.parse_args(argv)
    try:
        kinds = schedule.parse_kinds(args.kinds)
    except ValueError as e:
        parser.error(str(e))
    if args.faults is None and args.duration is None:
        args.duration = 60.0
    if args.faults is not None and args.duration is not None:
        parser.error("give --faults or --duration, not both")
    options = run.Options(seed=args.seed, brokers=args.brokers, partitions=args.partitions,
                          producers=args.producers, consumers=args.consumers, rate=args.rate, kinds=kinds,
                          faults=args.faults, duration_s=args.duration, hold_s=args.hold, rest_s=args.rest,
                          session_timeout_ms=args.session_timeout_ms, keep_data=args.keep_data)
    report = run.run(options, log=lambda line: print(line, flush=True))
    print(report.text())
    return 0 if report.verdict is not None and report.verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
