"""TLS for SSL/SASL_SSL listeners: broker ``ssl.*`` config -> a pyOpenSSL context factory, and
the subject of a TLS peer (Kafka's ``SslFactory``; ``security.principal`` maps it to a principal).

Owns reading key stores and trust stores (PEM files or inline PEM, PKCS12 files), protocol
versions, cipher suites, client authentication and the ``listener.name.<name>.ssl.*`` overrides.
It does not listen (``listener.SocketServer`` does) nor write bytes (``transport``).
"""

import re

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from OpenSSL import SSL, crypto
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator, IOpenSSLContextFactory
from zope.interface import implementer

from kafkatw.config import BROKER_CONFIG_DEF, ConfigError, Password
from kafkatw.network.request import ANONYMOUS_PRINCIPAL
from kafkatw.network.settings import listener_prefix
from kafkatw.security.principal import USER_TYPE, KafkaPrincipal

SSL_SECURITY_PROTOCOLS = ("SSL", "SASL_SSL")

#: Kafka's ``ssl.enabled.protocols`` names -> OpenSSL protocol versions.
_PROTOCOL_VERSIONS = {
    "TLSv1": SSL.TLS1_VERSION,
    "TLSv1.1": SSL.TLS1_1_VERSION,
    "TLSv1.2": SSL.TLS1_2_VERSION,
    "TLSv1.3": SSL.TLS1_3_VERSION,
}
_TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                 "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256")

#: Per-listener settings (``listener.name.<name>.<key>`` wins over ``<key>``).
SSL_KEYS = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
    "ssl.cipher.suites", "ssl.principal.mapping.rules", "ssl.endpoint.identification.algorithm",
)


def listener_ssl_config(config, listener_name):
    """``{ssl key: typed value}`` for one listener: prefixed overrides over the broker values."""
    prefixed = config.with_prefix(listener_prefix(listener_name))
    out = {}
    for key in SSL_KEYS:
        if key in prefixed:
            out[key] = BROKER_CONFIG_DEF[key].parse(prefixed[key]) if isinstance(prefixed[key], str) \
                else prefixed[key]
        else:
            out[key] = config[key]
    return out


def _secret(value):
    if value is None:
        return None
    return value.value if isinstance(value, Password) else value


def _read_file(name, path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError.invalid(name, path, "cannot read the file: %s" % (e.strerror or e,)) from None


def _pem_certificates(name, shown, data):
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as e:
        raise ConfigError.invalid(name, shown, "no valid PEM certificate (%s)" % (e,)) from None
    return certs


def _pem_private_key(name, shown, data, password):
    if b"PRIVATE KEY-----" not in data:
        raise ConfigError.invalid(name, shown, "no PEM private key found")
    try:
        return serialization.load_pem_private_key(
            data, password.encode("utf-8") if password else None)
    except TypeError as e:  # encrypted without a password, or a password for a plain key
        raise ConfigError.invalid(name, shown, "ssl.key.password does not fit the key (%s)" % (e,)) from None
    except ValueError as e:
        raise ConfigError.invalid(name, shown, "cannot load the private key (wrong ssl.key.password?"
                                  " %s)" % (e,)) from None


def load_keystore(cfg):
    """``(private_key, [certificate, ...chain])`` from the key store settings of ``cfg``."""
    kind = (cfg["ssl.keystore.type"] or "JKS").upper()
    location = cfg["ssl.keystore.location"]
    chain_pem = _secret(cfg["ssl.keystore.certificate.chain"])
    key_pem = _secret(cfg["ssl.keystore.key"])
    key_password = _secret(cfg["ssl.key.password"])
    if kind == "PEM":
        if location and (chain_pem or key_pem):
            raise ConfigError("Both ssl.keystore.location and ssl.keystore.certificate.chain/"
                              "ssl.keystore.key are set; use one of them", "ssl.keystore.location")
        if location:
            data = _read_file("ssl.keystore.location", location)
            certs = _pem_certificates("ssl.keystore.location", location, data)
            key = _pem_private_key("ssl.keystore.location", location, data, key_password)
        elif chain_pem and key_pem:
            certs = _pem_certificates("ssl.keystore.certificate.chain", Password(chain_pem),
                                      chain_pem.encode("utf-8"))
            key = _pem_private_key("ssl.keystore.key", Password(key_pem), key_pem.encode("utf-8"),
                                   key_password)
        else:
            raise ConfigError("An SSL listener needs ssl.keystore.location, or both "
                              "ssl.keystore.certificate.chain and ssl.keystore.key",
                              "ssl.keystore.location")
    elif kind == "PKCS12":
        if not location:
            raise ConfigError("ssl.keystore.type=PKCS12 needs ssl.keystore.location",
                              "ssl.keystore.location")
        data = _read_file("ssl.keystore.location", location)
        password = _secret(cfg["ssl.keystore.password"])
        try:
            key, cert, extra = pkcs12.load_key_and_certificates(
                data, password.encode("utf-8") if password else None)
        except ValueError as e:
            raise ConfigError.invalid("ssl.keystore.location", location,
                                      "cannot open the PKCS12 key store (wrong ssl.keystore.password?"
                                      " %s)" % (e,)) from None
        if key is None or cert is None:
            raise ConfigError.invalid("ssl.keystore.location", location,
                                      "the PKCS12 key store holds no private key with a certificate")
        certs = [cert] + list(extra or [])
    else:
        raise ConfigError.invalid("ssl.keystore.type", cfg["ssl.keystore.type"],
                                  "kafkatw reads PEM and PKCS12 key stores")
    return key, certs


def load_truststore(cfg):
    """The trusted certificates of ``cfg`` (an empty list when no trust store is set)."""
    kind = (cfg["ssl.truststore.type"] or "JKS").upper()
    location = cfg["ssl.truststore.location"]
    inline = _secret(cfg["ssl.truststore.certificates"])
    if not location and not inline:
        return []
    if kind == "PEM":
        if location and inline:
            raise ConfigError("Both ssl.truststore.location and ssl.truststore.certificates are set;"
                              " use one of them", "ssl.truststore.location")
        if location:
            return _pem_certificates("ssl.truststore.location", location,
                                     _read_file("ssl.truststore.location", location))
        return _pem_certificates("ssl.truststore.certificates", Password(inline),
                                 inline.encode("utf-8"))
    if kind == "PKCS12" and location:
        data = _read_file("ssl.truststore.location", location)
        password = _secret(cfg["ssl.truststore.password"])
        try:
            _, cert, extra = pkcs12.load_key_and_certificates(
                data, password.encode("utf-8") if password else None)
        except ValueError as e:
            raise ConfigError.invalid("ssl.truststore.location", location,
                                      "cannot open the PKCS12 trust store (%s)" % (e,)) from None
        return ([cert] if cert is not None else []) + list(extra or [])
    raise ConfigError.invalid("ssl.truststore.type", cfg["ssl.truststore.type"],
                              "kafkatw reads PEM (file or inline) and PKCS12 trust stores")


def openssl_cipher_name(name):
    """A Kafka/IANA cipher suite name (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``) as OpenSSL
    names it (``ECDHE-RSA-AES128-GCM-SHA256``); OpenSSL names pass through unchanged."""
    m = re.match(r"(?:TLS|SSL)_(\w+?)_WITH_(\w+)\Z", name)
    if not m:
        return name
    kx, enc = m.groups()
    kx = "" if kx == "RSA" else kx.replace("_", "-") + "-"
    a = re.match(r"AES_(128|256)_(GCM|CBC|CCM)(?:_(SHA\d*))?\Z", enc)
    if a:
        bits, mode, mac = a.groups()
        if mode == "GCM":
            enc = "AES%s-GCM-%s" % (bits, mac)
        elif mode == "CCM":
            enc = "AES%s-CCM" % bits
        else:
            enc = "AES%s-%s" % (bits, mac)
    elif enc == "CHACHA20_POLY1305_SHA256":
        enc = "CHACHA20-POLY1305"
    else:
        enc = enc.replace("_", "-")
    return kx + enc


def _protocol_range(protocols):
    versions = []
    for p in protocols:
        if p not in _PROTOCOL_VERSIONS:
            raise ConfigError.invalid("ssl.enabled.protocols", ",".join(protocols),
                                      "unknown protocol %s (known: %s)"
                                      % (p, ", ".join(_PROTOCOL_VERSIONS)))
        versions.append(_PROTOCOL_VERSIONS[p])
    if not versions:
        raise ConfigError.invalid("ssl.enabled.protocols", "", "at least one protocol is required")
    return min(versions), max(versions)


def _set_ciphers(ctx, suites):
    tls13 = [s for s in suites if s in _TLS13_SUITES]
    tls12 = [openssl_cipher_name(s) for s in suites if s not in _TLS13_SUITES]
    for original, name in zip([s for s in suites if s not in _TLS13_SUITES], tls12):
        probe = SSL.Context(SSL.TLS_SERVER_METHOD)
        try:
            probe.set_cipher_list(name.encode("ascii"))
        except (SSL.Error, UnicodeEncodeError):
            raise ConfigError.invalid("ssl.cipher.suites", ",".join(suites),
                                      "unknown cipher suite %s" % original) from None
    if tls12:
        ctx.set_cipher_list(":".join(tls12).encode("ascii"))
    if tls13:
        ctx.set_tls13_ciphersuites(":".join(tls13).encode("ascii"))


@implementer(IOpenSSLContextFactory)
class ServerContextFactory:
    """A Twisted server context factory (``getContext()``) holding one pyOpenSSL context."""

    def __init__(self, context, client_auth):
        self._context = context
        self.client_auth = client_auth

    def getContext(self):
        return self._context


def server_context_factory(cfg, listener_name="SSL"):
    """A :class:`ServerContextFactory` from one listener's ssl settings (see
    :func:`listener_ssl_config`); raises :class:`ConfigError` (one line) on any problem."""
    key, certs = load_keystore(cfg)
    trusted = load_truststore(cfg)
    client_auth = (cfg["ssl.client.auth"] or "none").lower()
    low, high = _protocol_range(list(cfg["ssl.enabled.protocols"] or []))

    ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
    ctx.set_min_proto_version(low)
    ctx.set_max_proto_version(high)
    ctx.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_CIPHER_SERVER_PREFERENCE)
    try:
        ctx.use_certificate(crypto.X509.from_cryptography(certs[0]))
        for extra in certs[1:]:
            ctx.add_extra_chain_cert(crypto.X509.from_cryptography(extra))
        ctx.use_privatekey(crypto.PKey.from_cryptography_key(key))
        ctx.check_privatekey()
    except (SSL.Error, TypeError, ValueError) as e:
        raise ConfigError("The key store of listener %s does not hold a usable key and "
                          "certificate pair: %s" % (listener_name, e), "ssl.keystore.location") from None
    if cfg["ssl.cipher.suites"]:
        _set_ciphers(ctx, list(cfg["ssl.cipher.suites"]))
    if client_auth in ("required", "requested"):
        if not trusted:
            raise ConfigError.invalid("ssl.client.auth", client_auth,
                                      "verifying clients needs ssl.truststore.location or "
                                      "ssl.truststore.certificates")
        store = ctx.get_cert_store()
        for cert in trusted:
            store.add_cert(crypto.X509.from_cryptography(cert))
        mode = SSL.VERIFY_PEER
        if client_auth == "required":
            mode |= SSL.VERIFY_FAIL_IF_NO_PEER_CERT
        ctx.set_verify(mode)
        ctx.set_client_ca_list([crypto.X509.from_cryptography(c).get_subject() for c in trusted])
    else:
        ctx.set_verify(SSL.VERIFY_NONE)
    # Needed for session resumption once clients are verified; harmless otherwise.
    ctx.set_session_id(("kafkatw-" + listener_name)[:32].encode("ascii", "replace"))
    return ServerContextFactory(ctx, client_auth)


def context_factories(config, endpoints=None):
    """``{listener_name: ServerContextFactory}`` for the SSL/SASL_SSL listeners of ``config``."""
    endpoints = config.listeners if endpoints is None else endpoints
    out = {}
    for ep in endpoints:
        if ep.security_protocol in SSL_SECURITY_PROTOCOLS:
            out[ep.listener_name] = server_context_factory(
                listener_ssl_config(config, ep.listener_name), ep.listener_name)
    return out


def principal_from_certificate(cert):
    """Kafka's default SSL principal: ``User:`` + the subject as an RFC 2253 string."""
    if cert is None:
        return ANONYMOUS_PRINCIPAL
    if isinstance(cert, crypto.X509):
        cert = cert.to_cryptography()
    return KafkaPrincipal(USER_TYPE, cert.subject.rfc4514_string())


def peer_dn(transport):
    """The subject (RFC 2253 string) of the TLS peer's certificate, or None without one."""
    get = getattr(transport, "getPeerCertificate", None)
    if get is None:
        return None
    try:
        cert = get()
    except Exception:  # no TLS connection (yet)
        return None
    if cert is None:
        return None
    if isinstance(cert, crypto.X509):
        cert = cert.to_cryptography()
    return cert.subject.rfc4514_string()



_TWISTED_TLS_VERSIONS = {"TLSv1": "TLSv1_0", "TLSv1.1": "TLSv1_1", "TLSv1.2": "TLSv1_2",
                         "TLSv1.3": "TLSv1_3"}


def client_tls_options(cfg, hostname, listener_name="SSL"):
    """What the broker's own client (follower fetches, controller requests) connects to another
    broker's ``listener_name`` with: Twisted client TLS options from that listener's ``ssl.*``
    settings (``cfg`` as :func:`listener_ssl_config` gives). The peer is verified against the
    trust store (the platform's CAs without one: never unverified) and, with
    ``ssl.endpoint.identification.algorithm=https`` (the default), must be ``hostname``; the
    key store, when set, is the client certificate (for ``ssl.client.auth=required``)."""
    from twisted.internet import ssl as tssl

    trusted = load_truststore(cfg)
    trust_root = (tssl.trustRootFromCertificates(
        [tssl.Certificate(crypto.X509.from_cryptography(c)) for c in trusted])
        if trusted else tssl.platformTrust())
    extra = {}
    client_cert = None
    if cfg["ssl.keystore.location"] or cfg["ssl.keystore.certificate.chain"]:
        key, certs = load_keystore(cfg)
        client_cert = tssl.PrivateCertificate.fromCertificateAndKeyPair(
            tssl.Certificate(crypto.X509.from_cryptography(certs[0])),
            tssl.KeyPair(crypto.PKey.from_cryptography_key(key)))
        if certs[1:]:
            extra["extraCertChain"] = [crypto.X509.from_cryptography(c) for c in certs[1:]]
    protocols = list(cfg["ssl.enabled.protocols"] or [])
    _protocol_range(protocols)  # one line naming an unknown protocol
    names = sorted(protocols, key=lambda p: _PROTOCOL_VERSIONS[p])
    extra["raiseMinimumTo"] = getattr(tssl.TLSVersion, _TWISTED_TLS_VERSIONS[names[0]])
    extra["lowerMaximumSecurityTo"] = getattr(tssl.TLSVersion, _TWISTED_TLS_VERSIONS[names[-1]])
    if cfg["ssl.cipher.suites"]:
        suites = [openssl_cipher_name(s) for s in cfg["ssl.cipher.suites"]]
        extra["acceptableCiphers"] = tssl.AcceptableCiphers.fromOpenSSLCipherString(
            ":".join(suites))
    algorithm = (cfg["ssl.endpoint.identification.algorithm"] or "").lower()
    if algorithm not in ("", "https"):
        raise ConfigError.invalid("ssl.endpoint.identification.algorithm", algorithm,
                                  "known: https, or empty to skip the host name check")
    if algorithm:
        return tssl.optionsForClientTLS(hostname, trustRoot=trust_root,
                                        clientCertificate=client_cert,
                                        extraCertificateOptions=extra)
    if client_cert is not None:
        extra["privateKey"] = client_cert.privateKey.original
        extra["certificate"] = client_cert.original
    return _NoHostnameCheck(tssl.CertificateOptions(trustRoot=trust_root, **extra).getContext())


@implementer(IOpenSSLClientConnectionCreator)
class _NoHostnameCheck:
    """Client TLS options that still verify the certificate chain but not the host name
    (``ssl.endpoint.identification.algorithm`` empty, as Kafka allows)."""

    def __init__(self, context):
        self._context = context

    def clientConnectionForTLS(self, tls_protocol):
        conn = SSL.Connection(self._context, None)
        conn.set_app_data(tls_protocol)
        conn.set_connect_state()
        return conn
