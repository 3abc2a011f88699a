"""A throwaway PKI for tests and demos: one CA, a server and a client certificate, as PEM files.

Owns only generating keys and certificates with ``cryptography``; it knows nothing about the
broker's config (``kafkatw.network.tls`` reads the files) and must never be used for real keys.
"""

import datetime
import ipaddress
import os

import attr
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: The client certificate's subject; Kafka's default principal is its RFC 2253 string.
CLIENT_SUBJECT = (("CN", "client"), ("OU", "test"), ("O", "kafkatw"))
CLIENT_PRINCIPAL = "User:CN=client,OU=test,O=kafkatw"
KEY_PASSWORD = "key-secret"

_OIDS = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
         "O": NameOID.ORGANIZATION_NAME, "C": NameOID.COUNTRY_NAME}


@attr.s(frozen=True)
class TestPki:
    """Paths of the generated PEM files (all in one directory)."""

    ca_cert = attr.ib()            # the CA certificate (trust store of both sides)
    server_cert = attr.ib()        # server chain only (leaf + CA)
    server_key = attr.ib()         # server key, unencrypted PKCS#8
    server_keystore = attr.ib()    # server key (encrypted with KEY_PASSWORD) + chain, one file
    client_cert = attr.ib()
    client_key = attr.ib()         # unencrypted
    client_keystore = attr.ib()    # client key (unencrypted) + chain, one file
    other_ca_cert = attr.ib()      # a CA that signed nothing here (a wrong trust store)
    key_password = attr.ib(default=KEY_PASSWORD)
    client_principal = attr.ib(default=CLIENT_PRINCIPAL)
    # a broker's key store for inter-broker TLS: its certificate serves and is presented as a
    # client (server and client auth), key encrypted with KEY_PASSWORD, + chain
    broker_keystore = attr.ib(default=None)


def _name(pairs):
    # x509.Name lists RDNs from the root down; RFC 2253 prints them reversed.
    return x509.Name([x509.NameAttribute(_OIDS[k], v) for k, v in reversed(pairs)])


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject, key, issuer, issuer_key, ca=False, server=False, client=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(subject).issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + \
        ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem_cert(cert):
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key, password=None):
    enc = (serialization.BestAvailableEncryption(password.encode()) if password
           else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def make_test_pki(directory):
    """Write a CA, a server (CN=localhost, SAN localhost/127.0.0.1) and a client
    certificate (:data:`CLIENT_SUBJECT`) into ``directory``; return a :class:`TestPki`."""
    os.makedirs(directory, exist_ok=True)
    ca_key = _key()
    ca_name = _name((("CN", "kafkatw test CA"), ("O", "kafkatw")))
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    other_key = _key()
    other_name = _name((("CN", "unrelated CA"),))
    other = _cert(other_name, other_key, other_name, other_key, ca=True)
    server_key = _key()
    server = _cert(_name((("CN", "localhost"), ("O", "kafkatw"))), server_key, ca_name, ca_key,
                   server=True)
    client_key = _key()
    client = _cert(_name(CLIENT_SUBJECT), client_key, ca_name, ca_key, client=True)
    broker_key = _key()
    broker = _cert(_name((("CN", "localhost"), ("OU", "broker"), ("O", "kafkatw"))), broker_key,
                   ca_name, ca_key, server=True, client=True)

    files = {
        "ca_cert": _pem_cert(ca),
        "other_ca_cert": _pem_cert(other),
        "server_cert": _pem_cert(server) + _pem_cert(ca),
        "server_key": _pem_key(server_key),
        "server_keystore": _pem_key(server_key, KEY_PASSWORD) + _pem_cert(server) + _pem_cert(ca),
        "client_cert": _pem_cert(client) + _pem_cert(ca),
        "client_key": _pem_key(client_key),
        "client_keystore": _pem_key(client_key) + _pem_cert(client) + _pem_cert(ca),
        "broker_keystore": _pem_key(broker_key, KEY_PASSWORD) + _pem_cert(broker) + _pem_cert(ca),
    }
    paths = {}
    for name, data in files.items():
        path = os.path.join(directory, name.replace("_", "-") + ".pem")
        with open(path, "wb") as f:
            f.write(data)
        paths[name] = path
    return TestPki(**paths)
