"""SASL/OAUTHBEARER (RFC 7628) on the server and its two token validators.

Owns the client initial response, the exchange (an invalid token gets a JSON error challenge,
the client's ``%x01`` then fails the login, as Kafka's ``OAuthBearerSaslServer``), Kafka's default
*unsecured* validator (alg "none" tokens, ``unsecuredValidator*`` JAAS options) and a validator
for signed JWTs (RS256/ES256 against a JWKS file: audience, issuer, exp/iat/nbf with clock skew,
scope). Signatures are checked with ``cryptography``, imported only when a signed validator is used.
"""

import base64
import json
import re
import time

import attr
from zope.interface import Interface, implementer

from kafkatw import registry
from kafkatw.config import ConfigError
from kafkatw.security.sasl import (
    CREDENTIAL_LIFETIME_MS,
    ISaslServer,
    ISaslServerFactory,
    SaslAuthenticationError,
    SaslError,
)

MECHANISM = "OAUTHBEARER"
LOGIN_MODULE = "OAuthBearerLoginModule"
CALLBACK_KEY = "oauthbearer.sasl.server.callback.handler.class"

_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_INITIAL_RESPONSE = re.compile(
    r"n,(?:a=(?P<authzid>%s))?,\x01(?P<kvpairs>(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01)*)\x01\Z" % _SASLNAME)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)\Z")


@attr.s(frozen=True)
class OAuthBearerToken:
    """A validated token: its text, principal, scopes and times (epoch ms)."""

    value = attr.ib(repr=False)
    principal_name = attr.ib()
    scope = attr.ib(converter=frozenset)
    lifetime_ms = attr.ib()
    start_time_ms = attr.ib(default=None)


class TokenValidationError(Exception):
    """The token is not acceptable; ``status`` and ``scope`` go into the JSON error challenge,
    the message only to the broker's log."""

    def __init__(self, message, status="invalid_token", scope=None):
        Exception.__init__(self, message)
        self.status = status
        self.scope = scope


class IOAuthBearerValidator(Interface):
    """Validates a bearer token (``<l>.oauthbearer.sasl.server.callback.handler.class``)."""

    def validate(token):
        """The :class:`OAuthBearerToken` of ``token`` (str); raise :class:`TokenValidationError`."""


def _b64url(part, what):
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (ValueError, TypeError):
        raise TokenValidationError("The %s is not base64url" % (what,)) from None


def _json(part, what):
    try:
        value = json.loads(_b64url(part, what).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise TokenValidationError("The %s is not JSON" % (what,)) from None
    if not isinstance(value, dict):
        raise TokenValidationError("The %s is not a JSON object" % (what,))
    return value


def split_jws(token):
    """``(header, claims, signature bytes, signing input)`` of a compact JWS."""
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenValidationError("The token is not a compact JWS (3 parts separated by dots)")
    return (_json(parts[0], "JOSE header"), _json(parts[1], "claims"), _b64url(parts[2], "signature"),
            ("%s.%s" % (parts[0], parts[1])).encode("ascii"))


def _time_claim_ms(claims, name, required):
    value = claims.get(name)
    if value is None:
        if required:
            raise TokenValidationError("Required claim missing: %s" % (name,))
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TokenValidationError("The %s claim had the incorrect type: %s" % (name, type(value).__name__))
    return int(value * 1000)


def _string_claim(claims, name):
    value = claims.get(name)
    if value is None:
        raise TokenValidationError("Required claim missing: %s" % (name,))
    if not isinstance(value, str) or not value.strip():
        raise TokenValidationError("The %s claim must be a non-empty string" % (name,))
    return value


def _scope(claims, name):
    value = claims.get(name)
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    raise TokenValidationError("The %s claim had the incorrect type" % (name,))


@implementer(IOAuthBearerValidator)
class UnsecuredValidator:
    """Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``: accepts unsigned (alg "none")
    tokens. Anyone can mint them: for development only, as in Kafka."""

    def __init__(self, jaas=None, clock=time.time, **_):
        options = {}
        for entry in jaas or ():
            if entry.module_name == LOGIN_MODULE:
                options = entry.options
        self.principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "sub").strip() or "sub"
        self.scope_claim = options.get("unsecuredValidatorScopeClaimName", "scope").strip() or "scope"
        self.required_scope = [s.strip() for s in options.get("unsecuredValidatorRequiredScope", "").split(",")
                               if s.strip()]
        skew = options.get("unsecuredValidatorAllowableClockSkewMs", "0")
        try:
            self.clock_skew_ms = int(skew)
            if self.clock_skew_ms < 0:
                raise ValueError
        except ValueError:
            raise ConfigError("unsecuredValidatorAllowableClockSkewMs must be a non-negative integer, got %r"
                              % (skew,), "sasl.jaas.config") from None
        self.clock = clock

    def validate(self, token):
        header, claims, signature, _ = split_jws(token)
        if header.get("alg") != "none":
            raise TokenValidationError("An unsecured token must have alg \"none\", not %r" % (header.get("alg"),))
        if signature:
            raise TokenValidationError("An unsecured token must have an empty signature")
        now_ms = int(self.clock() * 1000)
        exp = _time_claim_ms(claims, "exp", True)
        iat = _time_claim_ms(claims, "iat", False)
        if iat is not None and iat > now_ms + self.clock_skew_ms:
            raise TokenValidationError("The indicated time (iat) is too far in the future")
        if exp <= now_ms - self.clock_skew_ms:
            raise TokenValidationError("The indicated time (exp) is too far in the past")
        principal = _string_claim(claims, self.principal_claim)
        scope = _scope(claims, self.scope_claim)
        missing = [s for s in self.required_scope if s not in scope]
        if missing:
            raise TokenValidationError("The provided scope is missing a required scope: %s" % (missing[0],),
                                       status="insufficient_scope", scope=" ".join(self.required_scope))
        return OAuthBearerToken(token, principal, scope, exp, iat)


#: JWS algorithms of signed tokens: name -> (key type, hash name)
_ALGORITHMS = {"RS256": ("RSA", "SHA256"), "RS384": ("RSA", "SHA384"), "RS512": ("RSA", "SHA512"),
               "ES256": ("EC", "SHA256"), "ES384": ("EC", "SHA384"), "ES512": ("EC", "SHA512")}


def _jwk_public_key(jwk):
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    def integer(name):
        raw = jwk.get(name)
        if not isinstance(raw, str):
            raise ValueError("missing %s" % (name,))
        return int.from_bytes(_b64url(raw, "JWK " + name), "big")

    kty = jwk.get("kty")
    if kty == "RSA":
        return rsa.RSAPublicNumbers(integer("e"), integer("n")).public_key()
    if kty == "EC":
        curve = {"P-256": ec.SECP256R1, "P-384": ec.SECP384R1, "P-521": ec.SECP521R1}.get(jwk.get("crv"))
        if curve is None:
            raise ValueError("unsupported curve %r" % (jwk.get("crv"),))
        return ec.EllipticCurvePublicNumbers(integer("x"), integer("y"), curve()).public_key()
    raise ValueError("unsupported key type %r" % (kty,))


def load_jwks(path):
    """``[(kid or None, alg or None, kty, public key)]`` from a JWKS file; raises ValueError."""
    with open(path, "rb") as f:
        doc = json.loads(f.read().decode("utf-8"))
    keys = []
    for jwk in doc.get("keys", []) if isinstance(doc, dict) else []:
        if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
            continue
        try:
            keys.append((jwk.get("kid"), jwk.get("alg"), jwk.get("kty"), _jwk_public_key(jwk)))
        except (ValueError, TypeError, TokenValidationError):
            continue  # a key we cannot use: tokens signed by it fail to find a key
    if not keys:
        raise ValueError("no usable signature key (RSA or EC) in %s" % (path,))
    return keys


@implementer(IOAuthBearerValidator)
class JwtValidator:
    """Kafka's ``OAuthBearerValidatorCallbackHandler`` (KIP-768) for signed JWTs.

    Settings: ``sasl.oauthbearer.jwks.endpoint.url`` (a ``file:`` URL here),
    ``sasl.oauthbearer.expected.audience``, ``sasl.oauthbearer.expected.issuer``,
    ``sasl.oauthbearer.clock.skew.seconds``, ``sasl.oauthbearer.scope.claim.name``,
    ``sasl.oauthbearer.sub.claim.name``.
    """

    def __init__(self, jaas=None, clock=time.time, **_):
        self.clock = clock
        self.path = None
        self.keys = []
        self.audience = []
        self.issuer = None
        self.clock_skew_s = 30
        self.scope_claim = "scope"
        self.sub_claim = "sub"

    def configure(self, configs):
        url = (configs.get("sasl.oauthbearer.jwks.endpoint.url") or "").strip()
        if not url.startswith("file:"):
            raise ConfigError.invalid("sasl.oauthbearer.jwks.endpoint.url", url or None,
                                      "the signed-token validator needs a file: URL of a JWKS document "
                                      "(https endpoints are not supported)")
        self.path = url[len("file:"):]
        if self.path.startswith("//"):
            self.path = self.path[2:]
        try:
            self.keys = load_jwks(self.path)
        except (OSError, ValueError) as e:
            raise ConfigError.invalid("sasl.oauthbearer.jwks.endpoint.url", url, "cannot use the JWKS: %s"
                                      % (e,)) from None
        audience = configs.get("sasl.oauthbearer.expected.audience") or ""
        self.audience = [a.strip() for a in audience.split(",") if a.strip()]
        self.issuer = (configs.get("sasl.oauthbearer.expected.issuer") or "").strip() or None
        try:
            self.clock_skew_s = int(configs.get("sasl.oauthbearer.clock.skew.seconds", 30))
        except ValueError:
            raise ConfigError.invalid("sasl.oauthbearer.clock.skew.seconds",
                                      configs.get("sasl.oauthbearer.clock.skew.seconds"), "not an integer") from None
        self.scope_claim = configs.get("sasl.oauthbearer.scope.claim.name") or "scope"
        self.sub_claim = configs.get("sasl.oauthbearer.sub.claim.name") or "sub"

    def _key_for(self, header, alg):
        kid = header.get("kid")
        kty = _ALGORITHMS[alg][0]
        candidates = [k for k in self.keys if k[2] == kty and (k[1] is None or k[1] == alg)]
        if kid is not None:
            candidates = [k for k in candidates if k[0] == kid]
        elif len(candidates) > 1:
            raise TokenValidationError("The token names no key (kid) and the JWKS has several")
        if not candidates:
            raise TokenValidationError("No key in the JWKS matches the token (kid %r, alg %s)" % (kid, alg))
        return candidates[0][3]

    def _verify(self, key, alg, signature, signing_input):
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding
        from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

        kty, hash_name = _ALGORITHMS[alg]
        digest = getattr(hashes, hash_name)()
        try:
            if kty == "RSA":
                key.verify(signature, signing_input, padding.PKCS1v15(), digest)
            else:
                size = (key.curve.key_size + 7) // 8
                if len(signature) != 2 * size:
                    raise InvalidSignature()
                der = encode_dss_signature(int.from_bytes(signature[:size], "big"),
                                           int.from_bytes(signature[size:], "big"))
                key.verify(der, signing_input, ec.ECDSA(digest))
        except InvalidSignature:
            raise TokenValidationError("The token's signature is invalid") from None

    def validate(self, token):
        header, claims, signature, signing_input = split_jws(token)
        alg = header.get("alg")
        if alg not in _ALGORITHMS:
            raise TokenValidationError("Unsupported JWS algorithm %r (allowed: %s)" % (alg, ", ".join(_ALGORITHMS)))
        self._verify(self._key_for(header, alg), alg, signature, signing_input)
        now_ms = int(self.clock() * 1000)
        skew_ms = self.clock_skew_s * 1000
        exp = _time_claim_ms(claims, "exp", True)
        iat = _time_claim_ms(claims, "iat", True)
        nbf = _time_claim_ms(claims, "nbf", False)
        if exp <= now_ms - skew_ms:
            raise TokenValidationError("The token expired (exp)")
        if nbf is not None and nbf > now_ms + skew_ms:
            raise TokenValidationError("The token is not valid yet (nbf)")
        if iat > now_ms + skew_ms:
            raise TokenValidationError("The token was issued in the future (iat)")
        if self.issuer is not None and claims.get("iss") != self.issuer:
            raise TokenValidationError("The token's issuer (iss) is not the expected one")
        if self.audience:
            aud = claims.get("aud")
            auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            if not any(a in self.audience for a in auds):
                raise TokenValidationError("The token's audience (aud) is not an expected one")
        principal = _string_claim(claims, self.sub_claim)
        return OAuthBearerToken(token, principal, _scope(claims, self.scope_claim), exp, iat)


@implementer(ISaslServer)
class OAuthBearerSaslServer:
    mechanism_name = MECHANISM

    def __init__(self, validator):
        self._validator = validator
        self._token = None
        self._error = None
        self._rejection = None

    def evaluate_response(self, response):
        response = bytes(response)
        if response == b"\x01" and self._error is not None:
            raise SaslAuthenticationError(self._error, detail=self._rejection)
        if self._token is not None:
            raise SaslError("OAUTHBEARER authentication already complete")
        self._error = None
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError("Invalid OAUTHBEARER client first message: not UTF-8") from None
        m = _INITIAL_RESPONSE.match(text)
        if m is None:
            raise SaslError("Invalid OAUTHBEARER client first message")
        pairs = dict(kv.split("=", 1) for kv in m.group("kvpairs").split("\x01") if kv)
        auth = _AUTH.match(pairs.get("auth", ""))
        if auth is None or auth.group("scheme").lower() != "bearer":
            raise SaslError("Invalid OAUTHBEARER client first message: no auth=Bearer <token>")
        try:
            token = self._validator.validate(auth.group("token"))
        except TokenValidationError as e:
            error = {"status": e.status}
            if e.scope is not None:
                error["scope"] = e.scope
            self._error = json.dumps(error, separators=(",", ":"))
            self._rejection = str(e)  # for the broker's log, never sent
            return self._error.encode("utf-8")
        authzid = m.group("authzid")
        if authzid and authzid.replace("=2C", ",").replace("=3D", "=") != token.principal_name:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id (%s) that is different from "
                "the token's principal name (%s)" % (authzid, token.principal_name))
        self._token = token
        return b""

    def is_complete(self):
        return self._token is not None

    def authorization_id(self):
        if self._token is None:
            raise SaslError("OAUTHBEARER authentication not completed")
        return self._token.principal_name

    def negotiated_property(self, name):
        if name == CREDENTIAL_LIFETIME_MS and self._token is not None:
            return self._token.lifetime_ms
        return None


@implementer(ISaslServerFactory)
class OAuthBearerSaslServerFactory:
    """OAUTHBEARER on one listener: the JAAS entry must name ``OAuthBearerLoginModule``; tokens
    are checked by the configured validator (Kafka's default: the unsecured one)."""

    mechanism = MECHANISM

    def __init__(self, mechanism=MECHANISM, listener_name="", jaas=None, settings=None, credentials=None):
        settings = settings or {}
        prefix = "listener.name.%s." % listener_name.lower()
        if not any(e.module_name == LOGIN_MODULE for e in jaas or ()):
            raise ConfigError("SASL mechanism OAUTHBEARER on listener %s needs %soauthbearer.sasl.jaas.config "
                              "naming %s" % (listener_name, prefix, LOGIN_MODULE),
                              prefix + "oauthbearer.sasl.jaas.config")
        self.validator = registry.load(prefix + CALLBACK_KEY, settings.get(CALLBACK_KEY) or "unsecured",
                                       IOAuthBearerValidator, jaas=jaas, configs=settings)

    def create_server(self, context):
        return OAuthBearerSaslServer(self.validator)
