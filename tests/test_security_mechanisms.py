"""SASL mechanisms in process: SCRAM (RFC 7677 vector, nonce, proof, channel binding, replay),
PLAIN, the JAAS parser, the durable credential store and the SASL config checks."""

import base64
import json
import os
import tempfile

from twisted.trial.unittest import SynchronousTestCase

from kafkatw.config import ConfigError, KafkaConfig
from kafkatw.security import scram
from kafkatw.security.credentials import CREDENTIALS_FILE, CredentialStoreError, ScramCredentialStore
from kafkatw.security.jaas import JaasError, parse_jaas_config
from kafkatw.security.plain import JaasPlainCallbackHandler, PlainSaslServer
from kafkatw.security.sasl import SaslAuthenticationError, SaslError
from kafkatw.security.sasl_config import sasl_listeners

# RFC 7677 section 3
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


class Users:
    def __init__(self, **creds):
        self.creds = creds

    def get(self, user, mechanism):
        return self.creds.get(user)


def rfc_server():
    cred = scram.make_credential(scram.SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
    return scram.ScramSaslServer(scram.SCRAM_SHA_256, Users(user=cred), nonce_factory=lambda: RFC_SERVER_NONCE)


class ScramTests(SynchronousTestCase):
    def test_rfc7677_exchange(self):
        server = rfc_server()
        self.assertEqual(server.evaluate_response(RFC_CLIENT_FIRST), RFC_SERVER_FIRST)
        self.assertFalse(server.is_complete())
        self.assertEqual(server.evaluate_response(RFC_CLIENT_FINAL), RFC_SERVER_FINAL)
        self.assertTrue(server.is_complete())
        self.assertEqual(server.authorization_id(), "user")

    def test_credential_holds_no_password(self):
        cred = scram.make_credential(scram.SCRAM_SHA_512, "pencil", 4096)
        self.assertEqual(len(cred.salt), 32)
        self.assertEqual((len(cred.stored_key), len(cred.server_key)), (64, 64))
        self.assertNotIn(b"pencil", cred.salt + cred.stored_key + cred.server_key)

    def test_server_nonce_is_random_per_exchange(self):
        cred = scram.make_credential(scram.SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
        firsts = {scram.ScramSaslServer(scram.SCRAM_SHA_256, Users(user=cred)).evaluate_response(RFC_CLIENT_FIRST)
                  for _ in range(3)}
        self.assertEqual(len(firsts), 3)
        for first in firsts:
            nonce = first.split(b",")[0][2:]
            self.assertTrue(nonce.startswith(b"rOprNGfwEbeRWgbNEkqO"))
            self.assertGreaterEqual(len(nonce), len(b"rOprNGfwEbeRWgbNEkqO") + 32)

    def test_replayed_client_final_is_refused(self):
        server = rfc_server()
        server.evaluate_response(RFC_CLIENT_FIRST)
        server.evaluate_response(RFC_CLIENT_FINAL)
        self.assertRaises(SaslError, server.evaluate_response, RFC_CLIENT_FINAL)
        # on a new exchange the server's nonce differs: the recorded final fails the nonce check
        other = scram.ScramSaslServer(scram.SCRAM_SHA_256, Users(user=scram.make_credential(
            scram.SCRAM_SHA_256, "pencil", 4096, RFC_SALT)))
        other.evaluate_response(RFC_CLIENT_FIRST)
        with self.assertRaises(SaslError) as cm:
            other.evaluate_response(RFC_CLIENT_FINAL)
        self.assertIn("nonce", str(cm.exception))

    def assertFinalFails(self, final, text):
        server = rfc_server()
        server.evaluate_response(RFC_CLIENT_FIRST)
        with self.assertRaises(SaslError) as cm:
            server.evaluate_response(final)
        self.assertIn(text, str(cm.exception))
        self.assertFalse(server.is_complete())
        self.assertRaises(SaslError, server.evaluate_response, RFC_CLIENT_FINAL)  # failed for good

    def test_wrong_nonce(self):
        self.assertFinalFails(RFC_CLIENT_FINAL.replace(b"k0,p=", b"k1,p="), "nonce")

    def test_wrong_proof(self):
        self.assertFinalFails(RFC_CLIENT_FINAL.replace(b"p=dHzb", b"p=dHzc"), "credentials")

    def test_channel_binding_must_repeat_the_gs2_header(self):
        # "eSws" is base64("y,,"): the client said "n,," first
        self.assertFinalFails(RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"), "channel binding")

    def test_truncated_final(self):
        self.assertFinalFails(RFC_CLIENT_FINAL[:40], "Invalid SCRAM client final message")

    def test_client_first_errors(self):
        cases = [
            (b"p=tls-unique,,n=user,r=abc", SaslError, "Channel binding"),
            (b"n,,n=user", SaslError, "Invalid SCRAM client first message"),
            (b"n,,n=nobody,r=abc", SaslError, "Invalid user credentials"),
            (b"n,a=other,n=user,r=abc", SaslAuthenticationError, "authorization id"),
            (b"n,,n=us=er,r=abc", SaslError, "user name encoding"),
            (b"n,,n=user,r=abc,tokenauth=true", SaslError, "Invalid SCRAM client first message"),
            (b"n,,n=user,r=abc,t=x", SaslAuthenticationError, "extensions"),
            (b"\xff\xfe", SaslError, "UTF-8"),
        ]
        for token, error, text in cases:
            with self.assertRaises(error, msg=token) as cm:
                rfc_server().evaluate_response(token)
            self.assertIn(text, str(cm.exception))

    def test_final_nonce_may_repeat_the_client_half_in_front(self):
        # librdkafka 2.0.2 (Debian's kcat) sends r=<client nonce><full nonce>; Kafka accepts it
        server = rfc_server()
        server.evaluate_response(RFC_CLIENT_FIRST)
        without_proof = b"c=biws,r=rOprNGfwEbeRWgbNEkqOrOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
        auth_message = b"n=user,r=rOprNGfwEbeRWgbNEkqO," + RFC_SERVER_FIRST + b"," + without_proof
        mech = scram.SCRAM_SHA_256
        salted = scram.salted_password(mech, "pencil", RFC_SALT, 4096)
        client_key = mech.hmac(salted, b"Client Key")
        signature = mech.hmac(mech.hash(client_key), auth_message)
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature)))
        final = server.evaluate_response(without_proof + b",p=" + proof)
        self.assertEqual(final, b"v=" + base64.b64encode(mech.hmac(mech.hmac(salted, b"Server Key"), auth_message)))
        self.assertTrue(server.is_complete())

    def test_sasl_name_decoding(self):
        self.assertEqual(scram.decode_sasl_name("a=2Cb=3Dc"), "a,b=c")


class PlainTests(SynchronousTestCase):
    def server(self):
        return PlainSaslServer(JaasPlainCallbackHandler(parse_jaas_config(
            'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            'password="admin-secret" user_alice="alice-secret";')))

    def test_valid_login(self):
        s = self.server()
        self.assertEqual(s.evaluate_response(b"\0alice\0alice-secret"), b"")
        self.assertTrue(s.is_complete())
        self.assertEqual(s.authorization_id(), "alice")

    def test_authzid_equal_to_the_user_is_accepted(self):
        s = self.server()
        s.evaluate_response(b"alice\0alice\0alice-secret")
        self.assertEqual(s.authorization_id(), "alice")

    def test_failures(self):
        cases = [
            (b"\0alice\0wrong", SaslAuthenticationError, "Authentication failed: Invalid username or password"),
            (b"\0admin\0admin-secret", SaslAuthenticationError, "Invalid username or password"),  # not a user_
            (b"\0bob\0x", SaslAuthenticationError, "Invalid username or password"),
            (b"bob\0alice\0alice-secret", SaslAuthenticationError, "authorization id that is different"),
            (b"\0alice", SaslError, "expected 3 tokens, got 2"),
            (b"\0\0pw", SaslAuthenticationError, "username not specified"),
            (b"\0alice\0", SaslAuthenticationError, "password not specified"),
        ]
        for token, error, text in cases:
            s = self.server()
            with self.assertRaises(error, msg=token) as cm:
                s.evaluate_response(token)
            self.assertIn(text, str(cm.exception))
            self.assertFalse(s.is_complete())
            self.assertNotIn("secret", str(cm.exception))


class JaasTests(SynchronousTestCase):
    def test_entries_and_options(self):
        entries = parse_jaas_config('a.b.C required x="1 2;" y=z; d.E optional;')
        self.assertEqual([(e.login_module, e.flag, e.options) for e in entries],
                         [("a.b.C", "required", {"x": "1 2;", "y": "z"}), ("d.E", "optional", {})])
        self.assertEqual(entries[0].module_name, "C")

    def test_errors_are_one_line_without_values(self):
        for text, expected in [("", "no login module"), ("X", "control flag"), ("X required", "end with ';'"),
                               ('X required password="s3cret"', "end with ';'"),
                               ("X required a=;", "needs =value"), ('X bogus a="s3cret";', "control flag")]:
            with self.assertRaises(JaasError) as cm:
                parse_jaas_config(text)
            self.assertIn(expected, str(cm.exception))
            self.assertNotIn("s3cret", str(cm.exception))


class CredentialStoreTests(SynchronousTestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(self.dir))

    def test_durable_atomic_and_secret_free(self):
        store = ScramCredentialStore.in_dir(self.dir)
        cred = scram.make_credential(scram.SCRAM_SHA_256, "alice-secret", 8192)
        store.alter(upsertions=[("alice", "SCRAM-SHA-256", cred), ("bob", "SCRAM-SHA-512",
                                scram.make_credential(scram.SCRAM_SHA_512, "bob-secret"))])
        path = os.path.join(self.dir, CREDENTIALS_FILE)
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        self.assertFalse(os.path.exists(path + ".tmp"))
        with open(path, "rb") as f:
            raw = f.read()
        self.assertNotIn(b"secret", raw)
        again = ScramCredentialStore.in_dir(self.dir)
        self.assertEqual(again.get("alice", "SCRAM-SHA-256"), cred)
        self.assertEqual(again.describe("alice"), [("SCRAM-SHA-256", 8192)])
        self.assertEqual(again.users(), ["alice", "bob"])
        again.delete("alice", "SCRAM-SHA-256")
        self.assertEqual(ScramCredentialStore.in_dir(self.dir).users(), ["bob"])

    def test_iterations_bounded(self):
        store = ScramCredentialStore.in_dir(self.dir)
        for i in (4095, 16385):
            cred = scram.credential_from_salted_password(scram.SCRAM_SHA_256, b"x" * 32, b"salt", i)
            self.assertRaises(ValueError, store.upsert, "u", "SCRAM-SHA-256", cred)
        self.assertEqual(store.users(), [])

    def test_corrupt_file_is_one_line(self):
        with open(os.path.join(self.dir, CREDENTIALS_FILE), "w") as f:
            json.dump({"version": 7, "users": {}}, f)
        with self.assertRaises(CredentialStoreError) as cm:
            ScramCredentialStore.in_dir(self.dir)
        self.assertIn("unknown format version 7", str(cm.exception))


PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


class SaslConfigTests(SynchronousTestCase):
    """A SASL listener that could not authenticate anyone is a one-line ConfigError."""

    def listeners(self, **props):
        base = {"listeners": "PLAINTEXT://:0,SASL_PLAINTEXT://:0", "log.dirs": tempfile.mkdtemp()}
        base.update({(k if "." in k else k.replace("_", ".")): v for k, v in props.items()})
        store = ScramCredentialStore.in_dir(base["log.dirs"])
        return sasl_listeners(KafkaConfig.from_properties(base), store)

    def assertConfigError(self, expected, props):
        with self.assertRaises(ConfigError) as cm:
            self.listeners(**props)
        self.assertIn(expected, str(cm.exception))
        self.assertNotIn("\n", str(cm.exception))
        self.assertNotIn("alice-secret", str(cm.exception))

    def test_refusals(self):
        self.assertConfigError("Invalid value GSSAPI for configuration sasl.enabled.mechanisms: no "
                               "ISaslServerFactory plug-in is registered", {})
        self.assertConfigError("enables no SASL mechanism", {"sasl_enabled_mechanisms": ""})
        self.assertConfigError("needs listener.name.sasl_plaintext.plain.sasl.jaas.config",
                               {"sasl_enabled_mechanisms": "PLAIN"})
        self.assertConfigError("has no users", {
            "sasl_enabled_mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice-secret";'})
        self.assertConfigError("Invalid JAAS config", {
            "sasl_enabled_mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": 'X required user_alice="alice-secret"'})
        self.assertConfigError("SASL mechanism SCRAM-SHA-256 on listener SASL_PLAINTEXT needs "
                               "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config naming ScramLoginModule",
                               {"sasl_enabled_mechanisms": "SCRAM-SHA-256"})
        self.assertConfigError("listener.name.sasl_plaintext.plain.sasl.server.callback.handler.class: cannot "
                               "be loaded", {"sasl_enabled_mechanisms": "PLAIN",
                                             "listener.name.sasl_plaintext.plain.sasl.server.callback.handler.class":
                                                 "no.such.Handler"})

    def test_listener_overrides(self):
        got = self.listeners(**{"sasl_enabled_mechanisms": "PLAIN",
                                "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
                                "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
                                "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
                                "connections.max.reauth.ms": "5000",
                                "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": "2000"})
        listener = got["SASL_PLAINTEXT"]
        self.assertEqual(sorted(got), ["SASL_PLAINTEXT"])
        self.assertEqual(listener.enabled, ["SCRAM-SHA-512", "PLAIN"])
        self.assertEqual(listener.reauth_ms, {"SCRAM-SHA-512": 5000, "PLAIN": 2000})
        self.assertEqual(listener.max_receive_size, 524288)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def jws(header, claims, sign=None):
    head = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
    return head + "." + (b64url(sign(head.encode())) if sign else "")


NOW = 1_800_000_000.0


class OAuthBearerTests(SynchronousTestCase):
    def server(self, validator):
        from kafkatw.security.oauthbearer import OAuthBearerSaslServer

        return OAuthBearerSaslServer(validator)

    def unsecured(self, options=""):
        from kafkatw.security.oauthbearer import UnsecuredValidator

        return UnsecuredValidator(jaas=parse_jaas_config(
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required %s;" % options),
            clock=lambda: NOW)

    def first(self, token, authzid=""):
        return ("n,%s,\x01auth=Bearer %s\x01\x01" % ("a=" + authzid if authzid else "", token)).encode()

    def test_unsecured_token_logs_in_with_its_lifetime(self):
        from kafkatw.security.sasl import CREDENTIAL_LIFETIME_MS

        s = self.server(self.unsecured())
        token = jws({"alg": "none"}, {"sub": "alice", "exp": NOW + 60, "iat": NOW, "scope": "a b"})
        self.assertEqual(s.evaluate_response(self.first(token, "alice")), b"")
        self.assertTrue(s.is_complete())
        self.assertEqual(s.authorization_id(), "alice")
        self.assertEqual(s.negotiated_property(CREDENTIAL_LIFETIME_MS), int((NOW + 60) * 1000))

    def test_invalid_token_gets_a_json_challenge_then_fails(self):
        cases = [
            ({"sub": "alice", "exp": NOW - 1}, "", '{"status":"invalid_token"}'),
            ({"exp": NOW + 60}, "", '{"status":"invalid_token"}'),
            ({"sub": "alice", "exp": NOW + 60, "scope": "a"}, 'unsecuredValidatorRequiredScope="a,b"',
             '{"status":"insufficient_scope","scope":"a b"}'),
        ]
        for claims, options, error in cases:
            s = self.server(self.unsecured(options))
            self.assertEqual(s.evaluate_response(self.first(jws({"alg": "none"}, claims))), error.encode())
            self.assertFalse(s.is_complete())
            with self.assertRaises(SaslAuthenticationError) as cm:
                s.evaluate_response(b"\x01")
            self.assertEqual(str(cm.exception), error)

    def test_clock_skew_and_signed_tokens_refused_by_the_unsecured_validator(self):
        token = jws({"alg": "none"}, {"sub": "alice", "exp": NOW - 1})
        self.assertEqual(self.server(self.unsecured('unsecuredValidatorAllowableClockSkewMs="2000"'))
                         .evaluate_response(self.first(token)), b"")
        signed = jws({"alg": "RS256"}, {"sub": "alice", "exp": NOW + 60}, sign=lambda data: b"sig")
        self.assertEqual(self.server(self.unsecured()).evaluate_response(self.first(signed)),
                         b'{"status":"invalid_token"}')

    def test_malformed_first_message_and_authzid(self):
        token = jws({"alg": "none"}, {"sub": "alice", "exp": NOW + 60})
        for bad in [b"n,,auth=Bearer x", b"y,,\x01auth=Bearer x\x01\x01", b"n,,\x01auth=Basic abc\x01\x01"]:
            self.assertRaises(SaslError, self.server(self.unsecured()).evaluate_response, bad)
        with self.assertRaises(SaslAuthenticationError) as cm:
            self.server(self.unsecured()).evaluate_response(self.first(token, "bob"))
        self.assertIn("different from the token's principal name (alice)", str(cm.exception))

    def jwt_validator(self, jwks, **configs):
        from kafkatw.security.oauthbearer import JwtValidator

        path = os.path.join(tempfile.mkdtemp(), "jwks.json")
        with open(path, "w") as f:
            json.dump({"keys": jwks}, f)
        v = JwtValidator(clock=lambda: NOW)
        v.configure(dict({"sasl.oauthbearer.jwks.endpoint.url": "file:" + path}, **configs))
        return v

    def test_signed_tokens_rs256_and_es256(self):
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        from kafkatw.security.oauthbearer import TokenValidationError

        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        ec_key = ec.generate_private_key(ec.SECP256R1())
        rn, en = rsa_key.public_key().public_numbers().n, rsa_key.public_key().public_numbers().e
        xn, yn = ec_key.public_key().public_numbers().x, ec_key.public_key().public_numbers().y
        jwks = [{"kty": "RSA", "kid": "r1", "use": "sig", "n": b64url(rn.to_bytes(256, "big")),
                 "e": b64url(en.to_bytes(3, "big"))},
                {"kty": "EC", "kid": "e1", "crv": "P-256", "x": b64url(xn.to_bytes(32, "big")),
                 "y": b64url(yn.to_bytes(32, "big"))}]
        v = self.jwt_validator(jwks, **{"sasl.oauthbearer.expected.audience": "kafka,other",
                                        "sasl.oauthbearer.expected.issuer": "https://issuer"})

        def rs(data):
            return rsa_key.sign(data, padding.PKCS1v15(), hashes.SHA256())

        def es(data):
            r, s = decode_dss_signature(ec_key.sign(data, ec.ECDSA(hashes.SHA256())))
            return r.to_bytes(32, "big") + s.to_bytes(32, "big")

        good = {"sub": "alice", "exp": NOW + 60, "iat": NOW, "aud": ["kafka"], "iss": "https://issuer",
                "scope": ["a", "b"]}
        token = v.validate(jws({"alg": "RS256", "kid": "r1"}, good, rs))
        self.assertEqual((token.principal_name, token.scope, token.lifetime_ms),
                         ("alice", frozenset({"a", "b"}), int((NOW + 60) * 1000)))
        self.assertEqual(v.validate(jws({"alg": "ES256", "kid": "e1"}, good, es)).principal_name, "alice")
        cases = [
            (jws({"alg": "RS256", "kid": "r1"}, dict(good, sub="mallory"), lambda d: rs(d)[:-1] + b"\0"), "signature"),
            (jws({"alg": "RS256", "kid": "e1"}, good, rs), "No key"),
            (jws({"alg": "HS256", "kid": "r1"}, good, rs), "Unsupported JWS algorithm"),
            (jws({"alg": "none"}, good), "Unsupported JWS algorithm"),
            (jws({"alg": "RS256", "kid": "r1"}, dict(good, exp=NOW - 31), rs), "expired"),
            (jws({"alg": "RS256", "kid": "r1"}, dict(good, nbf=NOW + 31), rs), "not valid yet"),
            (jws({"alg": "RS256", "kid": "r1"}, dict(good, aud="elsewhere"), rs), "audience"),
            (jws({"alg": "RS256", "kid": "r1"}, dict(good, iss="https://evil"), rs), "issuer"),
            (jws({"alg": "RS256", "kid": "r1"}, {k: v for k, v in good.items() if k != "iat"}, rs), "iat"),
        ]
        for token, text in cases:
            with self.assertRaises(TokenValidationError) as cm:
                v.validate(token)
            self.assertIn(text, str(cm.exception))
        # within the 30 s skew
        self.assertEqual(v.validate(jws({"alg": "RS256", "kid": "r1"}, dict(good, exp=NOW - 29), rs)).principal_name,
                         "alice")

    def test_jwt_validator_config_errors(self):
        from kafkatw.security.oauthbearer import JwtValidator

        for url, text in [(None, "needs a file: URL"), ("https://idp/jwks", "needs a file: URL"),
                          ("file:/nonexistent/jwks.json", "cannot use the JWKS")]:
            with self.assertRaises(ConfigError) as cm:
                JwtValidator().configure({"sasl.oauthbearer.jwks.endpoint.url": url} if url else {})
            self.assertIn(text, str(cm.exception))

    def test_oauthbearer_needs_its_login_module(self):
        base = {"listeners": "SASL_PLAINTEXT://:0", "log.dirs": tempfile.mkdtemp(),
                "sasl.enabled.mechanisms": "OAUTHBEARER"}
        store = ScramCredentialStore.in_dir(base["log.dirs"])
        with self.assertRaises(ConfigError) as cm:
            sasl_listeners(KafkaConfig.from_properties(base), store)
        self.assertIn("needs listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config naming "
                      "OAuthBearerLoginModule", str(cm.exception))
        base["listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"] = \
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
        listener = sasl_listeners(KafkaConfig.from_properties(base), store)["SASL_PLAINTEXT"]
        self.assertEqual(type(listener.mechanisms["OAUTHBEARER"].validator).__name__, "UnsecuredValidator")
        base["listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class"] = \
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
        with self.assertRaises(ConfigError) as cm:
            sasl_listeners(KafkaConfig.from_properties(base), store)
        self.assertIn("sasl.oauthbearer.jwks.endpoint.url", str(cm.exception))


class CredentialWritesTests(SynchronousTestCase):
    """Writes run through run_blocking one at a time; a change is visible once it is on disk."""

    def test_serialized_and_visible_after_the_write(self):
        from twisted.internet import defer

        d_dir = tempfile.mkdtemp()
        pending = []

        def run_blocking(fn, *args):
            d = defer.Deferred()
            pending.append((d, fn, args))
            return d

        store = ScramCredentialStore.in_dir(d_dir)
        store.run_blocking = run_blocking
        cred = scram.make_credential(scram.SCRAM_SHA_256, "pw", 4096)
        first = store.exclusively(store.write, [("a", "SCRAM-SHA-256", cred)])
        second = store.exclusively(lambda: store.write([("b", "SCRAM-SHA-256", cred)]))
        self.assertEqual((len(pending), store.users()), (1, []))  # the second waits for the first
        d, fn, args = pending.pop()
        fn(*args)
        d.callback(None)
        self.assertEqual(self.successResultOf(first), None)
        self.assertEqual(store.users(), ["a"])
        self.assertEqual(len(pending), 1)  # the second starts from the first's state
        d, fn, args = pending.pop()
        fn(*args)
        d.callback(None)
        self.successResultOf(second)
        self.assertEqual(ScramCredentialStore.in_dir(d_dir).users(), ["a", "b"])

    def test_failed_write_changes_nothing(self):
        from twisted.internet import defer

        store = ScramCredentialStore.in_dir(tempfile.mkdtemp())
        store.run_blocking = lambda fn, *args: defer.fail(OSError(28, "No space left on device"))
        cred = scram.make_credential(scram.SCRAM_SHA_256, "pw", 4096)
        self.failureResultOf(store.exclusively(store.write, [("a", "SCRAM-SHA-256", cred)]), OSError)
        self.assertEqual(store.users(), [])
        # and the lock is free again
        store.run_blocking = None
        self.successResultOf(store.exclusively(store.write, [("a", "SCRAM-SHA-256", cred)]))
        self.assertEqual(store.users(), ["a"])
