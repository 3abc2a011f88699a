"""``python -m kafkatw``: the broker in the foreground, an alias of ``twistd -n kafka``.

Owns only the argument list handed to twistd: every argument is the kafka plug-in's
(``--config FILE``, ``--override key=value``); twistd's own options need ``twistd`` itself.
"""

import sys


def main(argv=None):
    from twisted.scripts.twistd import run

    args = sys.argv[1:] if argv is None else list(argv)
    sys.argv = ["twistd", "-n", "kafka"] + args
    run()


if __name__ == "__main__":
    main()
