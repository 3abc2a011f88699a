"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) on the server.

Owns the mechanisms' parameters, the credential derivation (salt, StoredKey, ServerKey,
iterations: never the password) and the two-round server exchange with its nonce, proof and
channel-binding checks (Kafka's ``ScramSaslServer``/``ScramFormatter``). Credentials are kept by
:mod:`kafkatw.security.credentials`. Primitives come from ``hashlib``, ``hmac`` and ``secrets``.
"""

import base64
import hashlib
import hmac
import re
import secrets

import attr
from zope.interface import implementer

from kafkatw.config import ConfigError
from kafkatw.security.sasl import ISaslServer, ISaslServerFactory, SaslAuthenticationError, SaslError

LOGIN_MODULE = "ScramLoginModule"


@attr.s(frozen=True)
class ScramMechanism:
    """``name`` (SASL name), ``type_id`` (the UserScramCredentials API's byte), hash name."""

    name = attr.ib()
    type_id = attr.ib()
    hash_name = attr.ib()
    min_iterations = attr.ib(default=4096)

    def hmac(self, key, data):
        return hmac.new(key, data, self.hash_name).digest()

    def hash(self, data):
        return hashlib.new(self.hash_name, data).digest()


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
MECHANISMS_BY_TYPE = {m.type_id: m for m in MECHANISMS.values()}
#: Kafka's bounds for AlterUserScramCredentials and stored credentials.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


@attr.s(frozen=True)
class ScramCredential:
    """What the broker stores for one user and mechanism (RFC 5802 section 3)."""

    salt = attr.ib()
    stored_key = attr.ib()
    server_key = attr.ib()
    iterations = attr.ib()


def salted_password(mechanism, password, salt, iterations):
    """``Hi(Normalize(password), salt, i)``: PBKDF2 with the mechanism's HMAC."""
    if isinstance(password, str):
        password = password.encode("utf-8")
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password, salt, iterations)


def credential_from_salted_password(mechanism, salted, salt, iterations):
    """The stored form of a salted password (what AlterUserScramCredentials sends)."""
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(salt=bytes(salt), stored_key=mechanism.hash(client_key),
                           server_key=mechanism.hmac(salted, b"Server Key"), iterations=iterations)


def make_credential(mechanism, password, iterations=MIN_ITERATIONS, salt=None):
    """A new credential for ``password`` with a random salt (the password is not kept)."""
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_from_salted_password(mechanism, salted_password(mechanism, password, salt, iterations),
                                           salt, iterations)


def _b64(data):
    return base64.b64encode(data).decode("ascii")


def _unb64(text, what):
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise SaslError("Invalid SCRAM %s: not base64" % (what,)) from None


def decode_sasl_name(text):
    """RFC 5802 saslname: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is invalid."""
    if re.search(r"=(?!2C|3D)", text):
        raise SaslError("Invalid SCRAM user name encoding")
    return text.replace("=2C", ",").replace("=3D", "=")


_PRINTABLE_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+\Z")
_CLIENT_FIRST = re.compile(
    r"(?P<gs2>(?P<cbflag>[nyp][^,]*),(?:a=(?P<authzid>[^,]*))?,)"
    r"(?P<bare>n=(?P<name>[^,]*),r=(?P<nonce>[^,]*)(?P<ext>(?:,[A-Za-z]=[^,]*)*))\Z", re.S)
_CLIENT_FINAL = re.compile(
    r"(?P<without_proof>c=(?P<cb>[^,]*),r=(?P<nonce>[^,]*)(?:,[A-Za-z]=[^,]*)*?),p=(?P<proof>[^,]*)\Z", re.S)

_CLIENT_FIRST_STATE, _CLIENT_FINAL_STATE, _COMPLETE, _FAILED = range(4)


@implementer(ISaslServer)
class ScramSaslServer:
    """One SCRAM exchange: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism, credentials, nonce_factory=None):
        self.mechanism = mechanism
        self.mechanism_name = mechanism.name
        self._credentials = credentials
        # the server's half of the nonce: 24 bytes from the CSPRNG, printable and comma-free
        self._nonce_factory = nonce_factory or (lambda: secrets.token_urlsafe(24))
        self._state = _CLIENT_FIRST_STATE
        self._username = None
        self._credential = None
        self._gs2 = None
        self._client_first_bare = None
        self._server_first = None
        self._nonce = None

    def evaluate_response(self, response):
        try:
            text = bytes(response).decode("utf-8")
        except UnicodeDecodeError:
            self._state = _FAILED
            raise SaslError("Invalid SCRAM message: not UTF-8") from None
        try:
            if self._state == _CLIENT_FIRST_STATE:
                return self._client_first(text)
            if self._state == _CLIENT_FINAL_STATE:
                return self._client_final(text)
            raise SaslError("Unexpected SCRAM message after the exchange %s"
                            % ("completed" if self._state == _COMPLETE else "failed"))
        except Exception:
            self._state = _FAILED
            raise

    def _client_first(self, text):
        m = _CLIENT_FIRST.match(text)
        if m is None:
            raise SaslError("Invalid SCRAM client first message")
        if m.group("cbflag")[0] == "p":
            raise SaslError("Channel binding (%s) is not supported" % (m.group("cbflag"),))
        if m.group("cbflag") not in ("n", "y"):
            raise SaslError("Invalid SCRAM channel-binding flag")
        nonce = m.group("nonce")
        if not _PRINTABLE_NONCE.match(nonce):
            raise SaslError("Invalid SCRAM client nonce")
        extensions = [e for e in m.group("ext").split(",") if e]
        if extensions:
            # Kafka's only extension, tokenauth (delegation tokens), is not served here
            raise SaslAuthenticationError("Authentication failed: SCRAM extensions are not supported")
        username = decode_sasl_name(m.group("name"))
        if not username:
            raise SaslError("Invalid SCRAM client first message: empty user name")
        authzid = m.group("authzid")
        if authzid is not None and authzid != "" and decode_sasl_name(authzid) != username:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization "
                                          "id that is different from username")
        credential = self._credentials.get(username, self.mechanism.name) if self._credentials else None
        if credential is None:
            raise SaslError("Authentication failed: Invalid user credentials")
        self._username = username
        self._credential = credential
        self._gs2 = m.group("gs2")
        self._client_first_bare = m.group("bare")
        self._nonce = nonce + self._nonce_factory()
        self._server_first = "r=%s,s=%s,i=%d" % (self._nonce, _b64(credential.salt), credential.iterations)
        self._state = _CLIENT_FINAL_STATE
        return self._server_first.encode("utf-8")

    def _client_final(self, text):
        m = _CLIENT_FINAL.match(text)
        if m is None:
            raise SaslError("Invalid SCRAM client final message")
        if _unb64(m.group("cb"), "channel binding") != self._gs2.encode("utf-8"):
            raise SaslError("Invalid SCRAM channel binding: it does not repeat the client's GS2 header")
        # Kafka checks only that the nonce ends with the server's (librdkafka 2.0.2, Debian's kcat,
        # repeats the client's half in front of it); a replay on another exchange still fails here
        received, expected = m.group("nonce").encode("utf-8"), self._nonce.encode("utf-8")
        if len(received) < len(expected) or not hmac.compare_digest(received[len(received) - len(expected):],
                                                                    expected):
            raise SaslError("Invalid client nonce in the final client message.")
        proof = _unb64(m.group("proof"), "client proof")
        auth_message = ("%s,%s,%s" % (self._client_first_bare, self._server_first,
                                      m.group("without_proof"))).encode("utf-8")
        mech = self.mechanism
        signature = mech.hmac(self._credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslError("Invalid SCRAM client proof length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(mech.hash(client_key), self._credential.stored_key):
            raise SaslError("Invalid client credentials")
        server_signature = mech.hmac(self._credential.server_key, auth_message)
        self._state = _COMPLETE
        return ("v=" + _b64(server_signature)).encode("ascii")

    def is_complete(self):
        return self._state == _COMPLETE

    def authorization_id(self):
        if self._state != _COMPLETE:
            raise SaslError("SCRAM authentication not completed")
        return self._username

    def negotiated_property(self, name):
        return None


@implementer(ISaslServerFactory)
class ScramSaslServerFactory:
    """SCRAM-SHA-256 or -512 on one listener; users come from the credential store.

    As in Kafka, the listener must name ``ScramLoginModule`` in the mechanism's JAAS config
    (an explicit opt-in; the users themselves are made with AlterUserScramCredentials)."""

    def __init__(self, mechanism, listener_name="", jaas=None, settings=None, credentials=None):
        if mechanism not in MECHANISMS:
            raise ValueError("not a SCRAM mechanism: %s" % (mechanism,))
        if credentials is None:
            raise ValueError("SCRAM needs the broker's credential store")
        if not any(e.module_name == LOGIN_MODULE for e in jaas or ()):
            key = "listener.name.%s.%s.sasl.jaas.config" % (listener_name.lower(), mechanism.lower())
            raise ConfigError("SASL mechanism %s on listener %s needs %s naming %s (its users are the "
                              "broker's SCRAM credentials)" % (mechanism, listener_name, key, LOGIN_MODULE), key)
        self.mechanism = mechanism
        self._scram = MECHANISMS[mechanism]
        self._credentials = credentials

    def create_server(self, context):
        return ScramSaslServer(self._scram, self._credentials)


def scram_sha_256(**kwargs):
    kwargs["mechanism"] = "SCRAM-SHA-256"
    return ScramSaslServerFactory(**kwargs)


def scram_sha_512(**kwargs):
    kwargs["mechanism"] = "SCRAM-SHA-512"
    return ScramSaslServerFactory(**kwargs)
