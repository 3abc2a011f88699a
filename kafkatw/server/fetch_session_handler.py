"""A fetcher's side of an incremental fetch session (KIP-227; Kafka's client-side
FetchSessionHandler, as the replica fetcher uses it): which partitions a Fetch lists, which it
forgets, the session id and epoch to send, and what an answer does to the session. It knows
nothing of logs or the wire; the leader's side is ``server.fetch_session``.
"""

import attr

from kafkatw.protocol import errors
from kafkatw.server.fetch_session import (
    INITIAL_EPOCH, INVALID_SESSION_ID, FetchMetadata, next_epoch)

#: no session yet: the next request is full and asks the leader for one
INITIAL = FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)


@attr.s(slots=True, frozen=True)
class SessionPartition:
    """What a session request says of one partition; a change of any field is sent again (a
    new ``topic_id``: the old partition forgotten, the new one added)."""

    topic_id = attr.ib()
    fetch_offset = attr.ib()
    log_start_offset = attr.ib()
    max_bytes = attr.ib()
    current_leader_epoch = attr.ib()
    last_fetched_epoch = attr.ib()


@attr.s(slots=True, frozen=True)
class FetchRequestData:
    """One request's content: ``to_send`` [(key, SessionPartition)] to list (all of them in a
    full request, the added and changed ones in an incremental one), ``to_forget``
    [(key, SessionPartition)] (session partitions no longer fetched, as the session has them), ``session`` {key: SessionPartition} (every
    partition the leader reads for this request: an answer may name any of them),
    ``metadata`` (session id and epoch)."""

    to_send = attr.ib()
    to_forget = attr.ib()
    session = attr.ib()
    metadata = attr.ib()

    @property
    def is_full(self):
        return self.metadata.is_full


class FetchSessionHandler:
    """Kafka's FetchSessionHandler for one leader connection. Keys are whatever the caller
    uses for a partition (the replica fetcher: ``(topic, partition)``), in the caller's order.

    :meth:`build` gives the next request; :meth:`handle_response` or :meth:`handle_error`
    must follow each one before the next is built (one request in flight)."""

    def __init__(self, node_id=None):
        self.node_id = node_id
        self.next_metadata = INITIAL
        self.session_partitions = {}  # key -> SessionPartition the leader's session holds

    @property
    def session_id(self):
        return self.next_metadata.session_id

    def build(self, partitions):
        """``partitions``: {key: SessionPartition} to fetch now. A full request lists them all
        (and replaces the session); an incremental one lists the new and changed ones and
        forgets those not fetched any more."""
        partitions = dict(partitions)
        if self.next_metadata.is_full:
            self.session_partitions = partitions
            return FetchRequestData(list(partitions.items()), [], partitions, self.next_metadata)
        old = self.session_partitions
        to_send = [(key, p) for key, p in partitions.items() if old.get(key) != p]
        to_forget = [(key, p) for key, p in old.items()
                     if key not in partitions or partitions[key].topic_id != p.topic_id]
        self.session_partitions = partitions
        return FetchRequestData(to_send, to_forget, partitions, self.next_metadata)

    def handle_response(self, error_code, session_id, response_keys):
        """An answer to the last built request: ``error_code`` and ``session_id`` its top
        level, ``response_keys`` the partitions it names. True if its partitions may be used
        (Kafka's handleResponse); the metadata of the next request is set either way."""
        if error_code != errors.NONE:
            if error_code == errors.FETCH_SESSION_ID_NOT_FOUND:
                self.next_metadata = INITIAL
            else:
                self._close_existing()
            return False
        if self.next_metadata.is_full:
            if any(key not in self.session_partitions for key in response_keys):
                self.next_metadata = INITIAL  # an answer naming what we did not ask
                return False
            if session_id == INVALID_SESSION_ID:
                self.next_metadata = INITIAL  # the leader keeps no session: full again
            else:
                self.next_metadata = FetchMetadata(session_id, next_epoch(INITIAL_EPOCH))
            return True
        if any(key not in self.session_partitions for key in response_keys):
            self._close_existing()
            return False
        if session_id == INVALID_SESSION_ID:
            self.next_metadata = INITIAL  # the leader closed the session
        else:
            self.next_metadata = FetchMetadata(session_id, next_epoch(self.next_metadata.epoch))
        return True

    def handle_error(self):
        """The request failed (connection lost, timeout): its effect on the leader's session
        is unknown, so the next request is full and closes it (Kafka's nextCloseExisting)."""
        self._close_existing()

    def _close_existing(self):
        if self.next_metadata.session_id == INVALID_SESSION_ID:
            self.next_metadata = INITIAL
        else:
            self.next_metadata = FetchMetadata(self.next_metadata.session_id, INITIAL_EPOCH)

