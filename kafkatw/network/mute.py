"""The per-connection mute state machine of Kafka's ``KafkaChannel``.

Owns only states, events and their legal transitions; the connection decides what
muting means on the wire (stop reading).  An illegal transition raises.
"""

import enum


class ChannelMuteState(enum.Enum):
    __hash__ = object.__hash__  # identity, in C (Enum hashes its name in Python): per-request lookups

    NOT_MUTED = "NOT_MUTED"
    MUTED = "MUTED"
    MUTED_AND_RESPONSE_PENDING = "MUTED_AND_RESPONSE_PENDING"
    MUTED_AND_THROTTLED = "MUTED_AND_THROTTLED"
    MUTED_AND_THROTTLED_AND_RESPONSE_PENDING = "MUTED_AND_THROTTLED_AND_RESPONSE_PENDING"


class ChannelMuteEvent(enum.Enum):
    __hash__ = object.__hash__

    REQUEST_RECEIVED = "REQUEST_RECEIVED"
    RESPONSE_SENT = "RESPONSE_SENT"
    THROTTLE_STARTED = "THROTTLE_STARTED"
    THROTTLE_ENDED = "THROTTLE_ENDED"


S = ChannelMuteState
E = ChannelMuteEvent
# The states every request passes through, as module globals: a member read off its Enum
# class goes through EnumType's __getattr__ hook (CPython's slow attribute path), a global
# load is specialised.
NOT_MUTED, MUTED, MUTED_AND_RESPONSE_PENDING = S.NOT_MUTED, S.MUTED, S.MUTED_AND_RESPONSE_PENDING

_TRANSITIONS = {
    (S.MUTED, E.REQUEST_RECEIVED): S.MUTED_AND_RESPONSE_PENDING,
    (S.MUTED_AND_RESPONSE_PENDING, E.RESPONSE_SENT): S.MUTED,
    (S.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING, E.RESPONSE_SENT): S.MUTED_AND_THROTTLED,
    (S.MUTED_AND_RESPONSE_PENDING, E.THROTTLE_STARTED): S.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING,
    (S.MUTED_AND_THROTTLED, E.THROTTLE_ENDED): S.MUTED,
    (S.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING, E.THROTTLE_ENDED): S.MUTED_AND_RESPONSE_PENDING,
}


class IllegalMuteTransition(Exception):
    """An event that has no transition from the current state (Kafka's IllegalStateException)."""


class ChannelMute:
    """``mute()``, ``maybe_unmute()`` and ``handle_event()`` as in ``KafkaChannel``.

    NOT_MUTED --mute()--> MUTED --REQUEST_RECEIVED--> MUTED_AND_RESPONSE_PENDING
    --RESPONSE_SENT--> MUTED --maybe_unmute()--> NOT_MUTED; the THROTTLED states keep
    the channel muted until both the response is sent and the throttle has ended.
    """

    __slots__ = ("state",)

    def __init__(self):
        self.state = NOT_MUTED

    @property
    def muted(self):
        return self.state is not NOT_MUTED

    def mute(self):
        if self.state is NOT_MUTED:
            self.state = MUTED

    def maybe_unmute(self):
        """Unmute only from MUTED; return whether the channel is now NOT_MUTED."""
        if self.state is MUTED:
            self.state = NOT_MUTED
        return self.state is NOT_MUTED

    def request_received(self):
        """:meth:`mute` then REQUEST_RECEIVED (what every request does), in one call."""
        state = self.state
        if state is NOT_MUTED or state is MUTED:
            self.state = MUTED_AND_RESPONSE_PENDING
        else:
            self.handle_event(E.REQUEST_RECEIVED)  # illegal from the other states: raises

    def response_sent(self):
        """RESPONSE_SENT then :meth:`maybe_unmute` (what every answer does), in one call;
        returns whether the channel is now NOT_MUTED."""
        if self.state is MUTED_AND_RESPONSE_PENDING:
            self.state = NOT_MUTED
            return True
        self.handle_event(E.RESPONSE_SENT)
        return self.maybe_unmute()

    def handle_event(self, event):
        try:
            self.state = _TRANSITIONS[(self.state, event)]
        except KeyError:
            raise IllegalMuteTransition(
                "cannot transition from %s for event %s" % (self.state.name, event.name)
            ) from None
