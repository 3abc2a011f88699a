"""The SASL authenticator of one connection on StringTransports and a Clock: what is served
before authentication, handshake and authenticate (v0 raw tokens and v1+), failures, the
principal of later requests, session expiry and re-authentication (KIP-368)."""

import struct

from twisted.trial import unittest

from kafkatw.config import Endpoint
from kafkatw.protocol import errors
from kafkatw.protocol import messages as m
from kafkatw.security.jaas import parse_jaas_config
from kafkatw.security.plain import PlainSaslServerFactory
from kafkatw.security.principal import DefaultPrincipalBuilder, KafkaPrincipal
from kafkatw.security.sasl_config import SaslListener

from tests.test_network_support import (
    SUPPORTED,
    Harness,
    ScriptedHandler,
    api_versions_frame,
    frame,
    split_responses,
)

SASL = Endpoint("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1", 0)
VERSIONS = {**SUPPORTED, 17: (0, 1), 36: (0, 2)}
JAAS = parse_jaas_config('org.apache.kafka.common.security.plain.PlainLoginModule required '
                         'user_alice="alice-secret" user_bob="bob-secret";')


def listener(reauth_ms=0, max_receive_size=524288, failed_delay_ms=0):
    plain = PlainSaslServerFactory(listener_name="SASL_PLAINTEXT", jaas=JAAS)
    return SaslListener(listener_name="SASL_PLAINTEXT", security_protocol="SASL_PLAINTEXT",
                        mechanisms={"PLAIN": plain}, reauth_ms={"PLAIN": reauth_ms},
                        max_receive_size=max_receive_size, principal_builder=DefaultPrincipalBuilder(),
                        failed_authentication_delay_ms=failed_delay_ms)


def handshake(cid, mechanism="PLAIN", version=1):
    return frame(17, version, cid, m.SaslHandshakeRequest(mechanism=mechanism))


def authenticate(cid, token, version=2):
    return frame(36, version, cid, m.SaslAuthenticateRequest(auth_bytes=token))


def decode(payload, api_key, version):
    view = memoryview(payload)
    _, pos = m.ResponseHeader.decode_from(view, 0, m.response_header_version(api_key, version))
    return m.RESPONSES[api_key].decode_from(view, pos, version)[0]


class AuthenticatorTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.handler = ScriptedHandler(versions=VERSIONS)
        self.h = Harness(self.handler, auto_drain=True, endpoint=SASL)
        self.h.server.sasl_listeners = {"SASL_PLAINTEXT": listener()}
        self.proto, self.tr = self.h.connect()

    def responses(self):
        out = split_responses(self.tr.value())
        self.tr.clear()
        return out

    def login(self, user="alice", password="alice-secret", version=2):
        self.proto.dataReceived(handshake(1) + authenticate(2, b"\0%s\0%s" % (user.encode(), password.encode()),
                                                             version))
        (_, hs), (_, auth) = self.responses()
        return decode(hs, 17, 1), decode(auth, 36, version)

    def test_only_api_versions_reaches_the_handler_before_authentication(self):
        self.proto.dataReceived(api_versions_frame(1))
        self.assertEqual([r.api_key for r in self.handler.calls], [18])
        self.assertFalse(self.tr.disconnecting)
        self.responses()
        self.proto.dataReceived(frame(3, 12, 2))  # Metadata before authenticating
        self.assertTrue(self.tr.disconnecting)
        self.assertEqual(self.tr.value(), b"")
        self.assertEqual([r.api_key for r in self.handler.calls], [18])
        self.assertEqual(self.h.server.metrics.failed_authentication["SASL_PLAINTEXT"], 1)

    def test_plain_login_sets_the_principal_of_later_requests(self):
        hs, auth = self.login()
        self.assertEqual((hs.error_code, hs.mechanisms), (errors.NONE, ["PLAIN"]))
        self.assertEqual((auth.error_code, auth.error_message, auth.auth_bytes, auth.session_lifetime_ms),
                         (errors.NONE, "", b"", 0))
        self.proto.dataReceived(frame(3, 12, 3))
        self.assertEqual(self.handler.calls[-1].context.principal, KafkaPrincipal("User", "alice"))
        self.assertEqual(self.h.server.metrics.successful_authentication["SASL_PLAINTEXT"], 1)
        self.assertFalse(self.tr.disconnecting)

    def test_wrong_password_answers_sasl_authentication_failed_then_closes(self):
        hs, auth = self.login(password="wrong")
        self.assertEqual(auth.error_code, errors.SASL_AUTHENTICATION_FAILED)
        self.assertEqual(auth.error_message, "Authentication failed: Invalid username or password")
        self.assertTrue(self.tr.disconnecting)
        self.assertEqual(self.handler.calls, [])
        self.assertEqual(self.h.server.metrics.failed_authentication["SASL_PLAINTEXT"], 1)

    def test_close_after_a_failure_waits_the_configured_delay_reading_nothing(self):
        self.h.server.sasl_listeners = {"SASL_PLAINTEXT": listener(failed_delay_ms=100)}
        proto, tr = self.h.connect()
        proto.dataReceived(handshake(1) + authenticate(2, b"\0alice\0wrong"))
        (_, _), (_, auth) = split_responses(tr.value())
        self.assertEqual(decode(auth, 36, 2).error_code, errors.SASL_AUTHENTICATION_FAILED)
        self.assertFalse(tr.disconnecting)
        proto.dataReceived(frame(3, 12, 3) + handshake(4))
        self.h.clock.advance(0.099)
        self.assertFalse(tr.disconnecting)
        self.h.clock.advance(0.001)
        self.assertTrue(tr.disconnecting)
        self.assertEqual(self.handler.calls, [])
        self.assertEqual(len(split_responses(tr.value())), 2)

    def test_unknown_mechanism_lists_the_enabled_ones_and_closes(self):
        self.proto.dataReceived(handshake(1, "SCRAM-SHA-256"))
        ((_, payload),) = self.responses()
        body = decode(payload, 17, 1)
        self.assertEqual((body.error_code, body.mechanisms), (errors.UNSUPPORTED_SASL_MECHANISM, ["PLAIN"]))
        self.assertTrue(self.tr.disconnecting)

    def test_v0_handshake_then_raw_tokens(self):
        self.proto.dataReceived(handshake(1, version=0))
        ((_, payload),) = self.responses()
        self.assertEqual(decode(payload, 17, 0).error_code, errors.NONE)
        token = b"\0alice\0alice-secret"
        self.proto.dataReceived(struct.pack(">i", len(token)) + token)
        self.assertEqual(self.tr.value(), struct.pack(">i", 0))  # PLAIN's empty challenge, size-prefixed
        self.tr.clear()
        self.proto.dataReceived(frame(3, 12, 2))
        self.assertEqual(self.handler.calls[-1].context.principal, KafkaPrincipal("User", "alice"))

    def test_v0_raw_token_failure_closes_without_an_answer(self):
        self.proto.dataReceived(handshake(1, version=0))
        self.responses()
        token = b"\0alice\0nope"
        self.proto.dataReceived(struct.pack(">i", len(token)) + token)
        self.assertEqual(self.tr.value(), b"")
        self.assertTrue(self.tr.disconnecting)

    def test_request_other_than_authenticate_after_the_handshake_closes(self):
        self.proto.dataReceived(handshake(1))
        self.responses()
        self.proto.dataReceived(api_versions_frame(2))
        self.assertTrue(self.tr.disconnecting)
        self.assertEqual(self.handler.calls, [])

    def test_oversized_frame_before_authentication_closes(self):
        self.h.server.sasl_listeners = {"SASL_PLAINTEXT": listener(max_receive_size=100)}
        proto, tr = self.h.connect()
        token = b"\0alice\0" + b"x" * 200
        proto.dataReceived(handshake(1) + authenticate(2, token))
        self.assertTrue(tr.disconnecting)
        self.assertEqual(len(split_responses(tr.value())), 1)  # the handshake's answer only

    def test_other_connections_are_unaffected(self):
        other, other_tr = self.h.connect()
        self.proto.dataReceived(frame(3, 12, 1))
        self.assertTrue(self.tr.disconnecting)
        other.dataReceived(handshake(1) + authenticate(2, b"\0bob\0bob-secret") + frame(3, 12, 3))
        self.assertFalse(other_tr.disconnecting)
        self.assertEqual(self.handler.calls[-1].context.principal, KafkaPrincipal("User", "bob"))


class AsyncCallbackTests(unittest.SynchronousTestCase):
    """A PLAIN callback handler answering later (a Deferred): the connection waits, muted."""

    def test_principal_after_the_deferred_fires(self):
        from twisted.internet import defer
        from zope.interface import implementer

        from kafkatw.security.plain import IPlainCallbackHandler

        pending = []

        @implementer(IPlainCallbackHandler)
        class Later:
            def authenticate(self, username, password):
                d = defer.Deferred()
                pending.append((d, password == "pw-" + username))
                return d

        plain = PlainSaslServerFactory.__new__(PlainSaslServerFactory)
        plain.callback = Later()
        handler = ScriptedHandler(versions=VERSIONS)
        h = Harness(handler, auto_drain=True, endpoint=SASL)
        h.server.sasl_listeners = {"SASL_PLAINTEXT": SaslListener(
            listener_name="SASL_PLAINTEXT", security_protocol="SASL_PLAINTEXT", mechanisms={"PLAIN": plain},
            reauth_ms={"PLAIN": 0}, max_receive_size=4096, principal_builder=DefaultPrincipalBuilder())}
        proto, tr = h.connect()
        proto.dataReceived(handshake(1) + authenticate(2, b"\0carol\0pw-carol") + frame(3, 12, 3))
        self.assertEqual(len(split_responses(tr.value())), 1)  # the handshake; authenticate waits
        self.assertEqual(handler.calls, [])
        d, ok = pending.pop()
        d.callback(ok)
        # then the Metadata that waited unparsed behind it, as carol
        self.assertEqual([cid for cid, _ in split_responses(tr.value())], [1, 2, 3])
        self.assertEqual([str(r.context.principal) for r in handler.calls], ["User:carol"])
        other, other_tr = h.connect()
        other.dataReceived(handshake(1) + authenticate(2, b"\0carol\0nope"))
        d, ok = pending.pop()
        d.callback(ok)
        (_, _), (_, auth) = split_responses(other_tr.value())
        self.assertEqual(decode(auth, 36, 2).error_code, errors.SASL_AUTHENTICATION_FAILED)
        self.assertTrue(other_tr.disconnecting)

    def test_sasl_plaintext_keeps_zero_copy(self):
        from kafkatw.network.listener import load_transport_layer
        from kafkatw.network.transport import PlaintextTransportLayer, TlsTransportLayer

        self.assertIsInstance(load_transport_layer(SASL), PlaintextTransportLayer)
        self.assertIsInstance(load_transport_layer(Endpoint("SASL_SSL", "SASL_SSL", "127.0.0.1", 0)),
                              TlsTransportLayer)


class ReauthenticationTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.handler = ScriptedHandler(versions=VERSIONS)
        self.h = Harness(self.handler, auto_drain=True, endpoint=SASL)
        self.h.server.sasl_listeners = {"SASL_PLAINTEXT": listener(reauth_ms=2000)}
        self.proto, self.tr = self.h.connect()
        self.proto.dataReceived(handshake(1) + authenticate(2, b"\0alice\0alice-secret"))
        (_, _), (_, auth) = split_responses(self.tr.value())
        self.tr.clear()
        self.auth = decode(auth, 36, 2)

    def test_session_lifetime_is_returned(self):
        self.assertEqual(self.auth.session_lifetime_ms, 2000)

    def test_expired_session_is_closed_at_its_next_request(self):
        self.h.clock.advance(1.9)
        self.proto.dataReceived(frame(3, 12, 3))
        self.assertEqual(len(self.handler.calls), 1)
        self.h.clock.advance(0.1)
        self.proto.dataReceived(frame(3, 12, 4))
        self.assertTrue(self.tr.disconnecting)
        self.assertEqual(len(self.handler.calls), 1)
        self.assertEqual(self.h.server.metrics.expired_connections_killed, 1)

    def test_reauthentication_renews_the_session(self):
        self.h.clock.advance(1.5)
        self.proto.dataReceived(handshake(5) + authenticate(6, b"\0alice\0alice-secret"))
        (_, _), (_, auth) = split_responses(self.tr.value())
        self.assertEqual(decode(auth, 36, 2).session_lifetime_ms, 2000)
        self.h.clock.advance(1.5)  # 3 s after the first login, 1.5 s after the second
        self.proto.dataReceived(frame(3, 12, 7))
        self.assertFalse(self.tr.disconnecting)
        self.assertEqual(self.handler.calls[-1].context.principal, KafkaPrincipal("User", "alice"))
        self.assertEqual(self.h.server.metrics.successful_reauthentication["SASL_PLAINTEXT"], 1)

    def test_reauthentication_cannot_change_the_principal(self):
        self.proto.dataReceived(handshake(5) + authenticate(6, b"\0bob\0bob-secret"))
        (_, _), (_, auth) = split_responses(self.tr.value())
        body = decode(auth, 36, 2)
        self.assertEqual(body.error_code, errors.SASL_AUTHENTICATION_FAILED)
        self.assertEqual(body.error_message, "Cannot change principals during re-authentication from "
                                             "User.alice: User.bob")
        self.assertTrue(self.tr.disconnecting)
        self.assertEqual(self.h.server.metrics.failed_reauthentication["SASL_PLAINTEXT"], 1)


class TokenLifetimeTests(unittest.SynchronousTestCase):
    """A credential with an expiry (an OAuth token) bounds the session with connections.max.reauth.ms."""

    def connect(self, reauth_ms, expires_in_s):
        from zope.interface import implementer

        from kafkatw.security.sasl import CREDENTIAL_LIFETIME_MS, ISaslServer, ISaslServerFactory

        clock_holder = {}

        @implementer(ISaslServer)
        class TokenServer:
            mechanism_name = "TOKEN"

            def __init__(self):
                self.done = False

            def evaluate_response(self, response):
                self.done = True
                return b""

            def is_complete(self):
                return self.done

            def authorization_id(self):
                return "svc"

            def negotiated_property(self, name):
                if name == CREDENTIAL_LIFETIME_MS:
                    return int((clock_holder["clock"].seconds() + expires_in_s) * 1000)
                return None

        @implementer(ISaslServerFactory)
        class TokenFactory:
            mechanism = "TOKEN"

            def create_server(self, context):
                return TokenServer()

        handler = ScriptedHandler(versions=VERSIONS)
        h = Harness(handler, auto_drain=True, endpoint=SASL)
        h.clock.advance(1_800_000_000)
        clock_holder["clock"] = h.clock
        plain = PlainSaslServerFactory(listener_name="SASL_PLAINTEXT", jaas=JAAS)
        h.server.sasl_listeners = {"SASL_PLAINTEXT": SaslListener(
            listener_name="SASL_PLAINTEXT", security_protocol="SASL_PLAINTEXT",
            mechanisms={"TOKEN": TokenFactory(), "PLAIN": plain}, reauth_ms={"TOKEN": reauth_ms, "PLAIN": 0},
            max_receive_size=4096, principal_builder=DefaultPrincipalBuilder())}
        proto, tr = h.connect()
        proto.dataReceived(handshake(1, "TOKEN") + authenticate(2, b"t"))
        (_, _), (_, auth) = split_responses(tr.value())
        tr.clear()
        return h, proto, tr, decode(auth, 36, 2).session_lifetime_ms

    def test_lifetime_is_the_sooner_of_token_expiry_and_max_reauth(self):
        self.assertEqual(self.connect(0, 1.5)[3], 1500)
        self.assertEqual(self.connect(2000, 1.5)[3], 1500)
        self.assertEqual(self.connect(1000, 1.5)[3], 1000)
        self.assertEqual(self.connect(1000, -5)[3], 0)  # already expired: no session at all

    def test_expired_token_session_closes_at_the_next_request(self):
        h, proto, tr, lifetime = self.connect(0, 1.5)
        h.clock.advance(1.5)
        proto.dataReceived(frame(3, 12, 3))
        self.assertTrue(tr.disconnecting)

    def test_reauthentication_with_another_mechanism_fails(self):
        h, proto, tr, _ = self.connect(0, 60)
        proto.dataReceived(handshake(5, "PLAIN") + authenticate(6, b"\0alice\0alice-secret"))
        (_, hs), (_, auth) = split_responses(tr.value())
        self.assertEqual(decode(hs, 17, 1).error_code, errors.NONE)
        body = decode(auth, 36, 2)
        self.assertEqual((body.error_code, body.error_message), (
            errors.SASL_AUTHENTICATION_FAILED,
            "SASL mechanism 'PLAIN' requested by client is not supported for re-authentication of mechanism 'TOKEN'"))
        self.assertTrue(tr.disconnecting)
