"""The broker's SCRAM credential store: one JSON file in the metadata log dir, durable and atomic.

Owns keeping ``{user: {mechanism: ScramCredential}}`` (salt, StoredKey, ServerKey, iterations;
never a password) and writing every change with write-to-temp, fsync, rename, fsync of the
directory: in a thread pool when one is given (``run_blocking``), one change at a time, the new
state visible only once it is on disk. It does not validate requests (``handlers/scram_credentials.py`` does).
"""

import base64
import json
import os

from twisted.internet import defer

from kafkatw.durable_file import write_atomically, write_atomically_off_reactor
from kafkatw.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, MECHANISMS, ScramCredential

CREDENTIALS_FILE = "__kafkatw_scram_credentials.json"
_FORMAT_VERSION = 1


class CredentialStoreError(ValueError):
    """The stored file cannot be read; one line naming the file."""


def _enc(data):
    return base64.b64encode(data).decode("ascii")


class ScramCredentialStore:
    """SCRAM credentials by user and mechanism, persisted in ``path`` (mode 0600)."""

    def __init__(self, path, run_blocking=None):
        self.path = path
        #: ``run_blocking(fn, *args) -> Deferred`` runs the file write off the reactor (a
        #: thread pool); None writes inline
        self.run_blocking = run_blocking
        self._users = {}
        self._lock = defer.DeferredLock()
        self._load()

    @classmethod
    def in_dir(cls, directory):
        return cls(os.path.join(directory, CREDENTIALS_FILE))

    def _load(self):
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except (FileNotFoundError, NotADirectoryError):
            return  # no store yet (a log dir that cannot be one fails the start on its own)
        except OSError as e:
            raise CredentialStoreError("cannot read the SCRAM credentials in %s: %s"
                                       % (self.path, e.strerror or e)) from None
        try:
            doc = json.loads(raw.decode("utf-8"))
            if doc.get("version") != _FORMAT_VERSION:
                raise ValueError("unknown format version %r" % (doc.get("version"),))
            users = {}
            for user, mechs in doc["users"].items():
                for mech, c in mechs.items():
                    if mech not in MECHANISMS:
                        raise ValueError("unknown mechanism %s" % (mech,))
                    users.setdefault(user, {})[mech] = ScramCredential(
                        salt=base64.b64decode(c["salt"]), stored_key=base64.b64decode(c["stored_key"]),
                        server_key=base64.b64decode(c["server_key"]), iterations=int(c["iterations"]))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CredentialStoreError("cannot read the SCRAM credentials in %s: %s" % (self.path, e)) from None
        self._users = users

    @staticmethod
    def _encode(users):
        doc = {"version": _FORMAT_VERSION, "users": {
            user: {mech: {"salt": _enc(c.salt), "stored_key": _enc(c.stored_key),
                          "server_key": _enc(c.server_key), "iterations": c.iterations}
                   for mech, c in sorted(mechs.items())}
            for user, mechs in sorted(users.items())}}
        return json.dumps(doc, indent=1).encode("utf-8")

    # -- reading -----------------------------------------------------------------------------
    def get(self, user, mechanism):
        """The credential of ``user`` for ``mechanism`` (a name), or None."""
        return self._users.get(user, {}).get(mechanism)

    def users(self):
        return sorted(self._users)

    def describe(self, user):
        """``[(mechanism name, iterations)]`` of ``user`` (empty if unknown)."""
        return [(mech, c.iterations) for mech, c in sorted(self._users.get(user, {}).items())]

    # -- changing ----------------------------------------------------------------------------
    def _changed(self, upsertions, deletions):
        users = {u: dict(m) for u, m in self._users.items()}
        for user, mech in deletions:
            users.get(user, {}).pop(mech, None)
            if user in users and not users[user]:
                del users[user]
        for user, mech, credential in upsertions:
            if mech not in MECHANISMS:
                raise ValueError("unknown SCRAM mechanism %s" % (mech,))
            if not MIN_ITERATIONS <= credential.iterations <= MAX_ITERATIONS:
                raise ValueError("iterations must be within %d..%d" % (MIN_ITERATIONS, MAX_ITERATIONS))
            users.setdefault(user, {})[mech] = credential
        return users

    def alter(self, upsertions=(), deletions=()):
        """Apply ``[(user, mechanism, ScramCredential)]`` and ``[(user, mechanism)]`` in one
        write, now, on this thread (before the broker runs: tests, ``kafkatw.testing``)."""
        users = self._changed(upsertions, deletions)
        write_atomically(self.path, self._encode(users), mode=0o600)
        self._users = users

    def exclusively(self, fn, *args):
        """Run ``fn(*args)`` (which may return a Deferred) after every change begun before it has
        finished: a request reads the store and writes it with nothing in between."""
        return self._lock.run(fn, *args)

    def write(self, upsertions=(), deletions=()):
        """Like :meth:`alter`, off the reactor with ``run_blocking``; a Deferred firing once the
        change is on disk and visible. Call it inside :meth:`exclusively`."""
        users = self._changed(upsertions, deletions)
        data = self._encode(users)
        d = write_atomically_off_reactor(self.run_blocking, self.path, data, 0o600)

        def written(_):
            self._users = users

        return d.addCallback(written)

    def upsert(self, user, mechanism, credential):
        self.alter(upsertions=[(user, mechanism, credential)])

    def delete(self, user, mechanism):
        self.alter(deletions=[(user, mechanism)])
