"""``python -m bench [--quick] [--rounds N] [--only SUBSTRING ...] [--json PATH] [--baseline TREE]``."""

import argparse

from bench.runner import run


def main():
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="shorter trials and fewer workloads (~2 min)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", help="run workloads whose name contains one of these")
    ap.add_argument("--json", default="/tmp/kafkatw-bench.json", help="raw results (default %(default)s)")
    ap.add_argument("--baseline", metavar="TREE",
                    help="run this kafkatw checkout (PYTHONPATH) as the second broker instead of Tansu")
    a = ap.parse_args()
    run(quick=a.quick, rounds=a.rounds, only=a.only, json_path=a.json, baseline=a.baseline)


if __name__ == "__main__":
    main()
