"""``kafkatw users scram set|describe|delete``: SCRAM credentials through
AlterUserScramCredentials/DescribeUserScramCredentials, as Kafka's kafka-configs ``--entity-type
users``. The password is salted and hashed here; only the salted password leaves the client.
"""

import secrets
import sys

from kafkatw.cli.client import ClientError, check
from kafkatw.cli.helpers import print_table
from kafkatw.cli.output import wants_json, write_json
from kafkatw.protocol import messages

SCRAM_MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {v: k for k, v in SCRAM_MECHANISMS.items()}


def add_parser(sub):
    p = sub.add_parser("users", help="manage SCRAM users")
    usub = p.add_subparsers(dest="kind", metavar="KIND")
    usub.required = True
    s = usub.add_parser("scram", help="SCRAM-SHA-256/512 credentials")
    ssub = s.add_subparsers(dest="action", metavar="ACTION")
    ssub.required = True

    q = ssub.add_parser("set", help="create or replace a user's credential")
    q.add_argument("--user", required=True)
    q.add_argument("--mechanism", choices=sorted(SCRAM_MECHANISMS), default="SCRAM-SHA-256")
    q.add_argument("--iterations", type=int, default=4096, help="4096..16384 (default 4096)")
    q.add_argument("--password", required=True, help="the password, or - to read one line from stdin")
    q.set_defaults(func=cmd_set)

    q = ssub.add_parser("describe", help="users and their mechanisms and iterations")
    q.add_argument("--user", action="append", help="user(s) to describe (default: all)")
    q.set_defaults(func=cmd_describe)

    q = ssub.add_parser("delete", help="delete a user's credential")
    q.add_argument("--user", required=True)
    q.add_argument("--mechanism", choices=sorted(SCRAM_MECHANISMS), default="SCRAM-SHA-256")
    q.set_defaults(func=cmd_delete)


def _alter(client, upsertions=(), deletions=()):
    req = messages.AlterUserScramCredentialsRequest(upsertions=list(upsertions), deletions=list(deletions))
    resp = client.call(req)
    for r in resp.results:
        check(r.error_code, r.error_message, "user %s" % r.user)


def cmd_set(client, args):
    from kafkatw.security.scram import MECHANISMS, salted_password

    password = args.password
    if password == "-":
        password = (args.stdin or sys.stdin).readline().rstrip("\r\n")
    if not password:
        raise ClientError("the password must not be empty")
    salt = secrets.token_bytes(32)
    Upsertion = messages.AlterUserScramCredentialsRequest.ScramCredentialUpsertion
    _alter(client, upsertions=[Upsertion(
        name=args.user, mechanism=SCRAM_MECHANISMS[args.mechanism], iterations=args.iterations, salt=salt,
        salted_password=salted_password(MECHANISMS[args.mechanism], password, salt, args.iterations))])
    args.out.write("Set %s credential of user %s (%d iterations).\n" % (args.mechanism, args.user, args.iterations))


def cmd_delete(client, args):
    Deletion = messages.AlterUserScramCredentialsRequest.ScramCredentialDeletion
    _alter(client, deletions=[Deletion(name=args.user, mechanism=SCRAM_MECHANISMS[args.mechanism])])
    args.out.write("Deleted %s credential of user %s.\n" % (args.mechanism, args.user))


def cmd_describe(client, args):
    UserName = messages.DescribeUserScramCredentialsRequest.UserName
    users = [UserName(name=u) for u in args.user] if args.user else None
    resp = client.call(messages.DescribeUserScramCredentialsRequest(users=users))
    check(resp.error_code, resp.error_message, "DescribeUserScramCredentials")
    rows = []
    for r in sorted(resp.results, key=lambda r: r.user):
        check(r.error_code, r.error_message, "user %s" % r.user)
        for info in r.credential_infos:
            rows.append([r.user, MECHANISM_NAMES.get(info.mechanism, "UNKNOWN(%d)" % info.mechanism),
                         info.iterations])
    if wants_json(args):
        write_json(args.out, [{"user": u, "mechanism": m, "iterations": i} for u, m, i in rows])
        return
    print_table(["USER", "MECHANISM", "ITERATIONS"], rows, args.out)
