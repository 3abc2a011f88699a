"""Argument parsing and dispatch of the ``kafkatw`` command, and ``--command-config`` loading.
The commands live in sibling modules (each adds its sub-parser); what they share is in
``kafkatw.cli.helpers`` and ``kafkatw.cli.output``, so they never import this module.
"""

import argparse
import sys

from kafkatw.cli import (acls, cluster, configs, consume, groups, leaders, logdump, partitions, produce, quotas,
                         topics, transactions, users)
from kafkatw.cli.client import (BrokerConnectionError, ClientError, KafkaClient, KafkaResponseError,
                                UsageError)
from kafkatw.cli.output import FORMATS

#: Exit statuses: done, failed otherwise, usage, no broker reachable or connection lost, and
#: an error code from the broker (scripts can tell a typo from an outage from a refusal).
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_CONNECTION, EXIT_BROKER = 0, 1, 2, 3, 4


def read_command_config(path):
    """Client properties (``key=value`` lines) from ``--command-config``."""
    from kafkatw.config import parse_properties

    try:
        with open(path, encoding="utf-8") as f:
            return {k: str(v) for k, v in parse_properties(f.read(), path).items()}
    except OSError as e:
        raise ClientError("cannot read --command-config %s: %s" % (path, e.strerror))


def add_global_options(parser, defaults=True):
    """The options every Kafka tool takes, on the top parser (with defaults) and again on each
    subcommand (``defaults=False``: absent there, the top parser's value stays), so they may be
    typed before or after the subcommand: ``kafkatw topics list --bootstrap-server H:P``."""
    def default(value):
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("--bootstrap-server", "--bootstrap-servers", dest="bootstrap_server",
                        metavar="HOST:PORT", default=default(None),
                        help="broker(s) to connect to, comma-separated")
    parser.add_argument("--command-config", metavar="FILE", default=default(None),
                        help="client properties file (security.protocol, ssl.cafile, "
                             "ssl.truststore.location (PEM), ssl.certificate.location, "
                             "sasl.mechanism, sasl.username, sasl.password or sasl.jaas.config, ...)")
    parser.add_argument("--timeout", type=float, metavar="SECONDS", default=default(30.0),
                        help="socket timeout (default 30)")
    parser.add_argument("--output", choices=FORMATS, default=default("text"),
                        help="listings as aligned text (default) or one JSON document")


class SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser: it accepts the global options too (nested ones inherit the class)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        add_global_options(self, defaults=False)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="kafkatw", description="Administer, produce to and consume from Kafka-compatible brokers.",
        epilog="Exit status: 0 done, 1 failed, 2 usage error, 3 no broker reachable or connection "
               "lost, 4 the broker answered with an error.")
    add_global_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=SubcommandParser)
    sub.required = True
    for module in (topics, cluster, leaders, groups, configs, produce, consume, logdump, users, transactions, quotas,
                   acls, partitions):
        module.add_parser(sub)
    return parser


def main(argv=None, stdin=None, stdout=None, stderr=None):
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    parser = build_parser()
    args = parser.parse_args(argv)
    args.stdin = stdin or sys.stdin
    args.out = stdout
    client = None
    try:
        if getattr(args, "needs_client", True):
            if not args.bootstrap_server:
                parser.error("--bootstrap-server is required for '%s'" % args.command)
            config = read_command_config(args.command_config) if args.command_config else {}
            client = KafkaClient(args.bootstrap_server, config, timeout=args.timeout)
        return args.func(client, args) or EXIT_OK
    except ClientError as e:
        stderr.write("Error: %s\n" % (e,))
        return exit_status(e)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    finally:
        if client is not None:
            client.close()


def exit_status(error):
    """The exit status a :class:`ClientError` ends the command with."""
    for kind, status in ((UsageError, EXIT_USAGE), (BrokerConnectionError, EXIT_CONNECTION),
                         (KafkaResponseError, EXIT_BROKER)):
        if isinstance(error, kind):
            return status
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
