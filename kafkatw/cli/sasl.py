"""SASL login of the CLI's blocking client: PLAIN and SCRAM-SHA-256/512 from client properties.

Owns reading ``sasl.mechanism`` (or librdkafka's ``sasl.mechanisms``) with ``sasl.username`` /
``sasl.password`` or a Java ``sasl.jaas.config``, and the client side of the exchange over
SaslHandshake v1 + SaslAuthenticate. The SCRAM formulas come from ``kafkatw.security.scram``.
"""

import base64
import hmac
import secrets

from kafkatw.protocol import messages

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SaslClientError(Exception):
    """The login cannot be made (bad settings) or was refused; one line."""


def settings(config):
    """``(mechanism, username, password)`` from client properties; None without SASL."""
    protocol = config.get("security.protocol", "PLAINTEXT").upper()
    if not protocol.startswith("SASL_"):
        return None
    mechanism = (config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "GSSAPI").strip().upper()
    if mechanism not in MECHANISMS:
        raise SaslClientError("sasl.mechanism %s is not supported by this client (use one of %s)"
                              % (mechanism, ", ".join(MECHANISMS)))
    username, password = config.get("sasl.username"), config.get("sasl.password")
    jaas = config.get("sasl.jaas.config")
    if jaas and (username is None or password is None):
        from kafkatw.security.jaas import JaasError, parse_jaas_config

        try:
            entries = parse_jaas_config(jaas)
        except JaasError as e:
            raise SaslClientError("sasl.jaas.config: %s" % (e,)) from None
        options = entries[0].options if entries else {}
        username = options.get("username") if username is None else username
        password = options.get("password") if password is None else password
    if not username or password is None:
        raise SaslClientError("SASL needs sasl.username and sasl.password (or a sasl.jaas.config "
                              "with username and password)")
    return mechanism, username, password


def _authenticate(conn, token):
    version = conn.version_for(36)
    resp = conn.send(messages.SaslAuthenticateRequest(auth_bytes=token), version, api_key=36)
    if resp.error_code:
        raise SaslClientError("SASL authentication failed: %s" % (resp.error_message or resp.error_code,))
    return bytes(resp.auth_bytes or b"")


def _escape(name):
    return name.replace("=", "=3D").replace(",", "=2C")


def login(conn, mechanism, username, password):
    """Authenticate ``conn`` (a ``BrokerConnection`` after ApiVersions)."""
    resp = conn.send(messages.SaslHandshakeRequest(mechanism=mechanism), conn.version_for(17, 1), api_key=17)
    if resp.error_code:
        raise SaslClientError("the broker does not accept SASL mechanism %s (enabled: %s)"
                              % (mechanism, ", ".join(resp.mechanisms or []) or "none"))
    if mechanism == "PLAIN":
        _authenticate(conn, b"\0" + username.encode("utf-8") + b"\0" + password.encode("utf-8"))
        return
    from kafkatw.security.scram import MECHANISMS as SCRAM, salted_password

    scram = SCRAM[mechanism]
    nonce = secrets.token_urlsafe(24)
    first_bare = "n=%s,r=%s" % (_escape(username), nonce)
    server_first = _authenticate(conn, ("n,," + first_bare).encode("utf-8")).decode("utf-8")
    fields = dict(item.split("=", 1) for item in server_first.split(",") if "=" in item)
    if not fields.get("r", "").startswith(nonce) or "s" not in fields or "i" not in fields:
        raise SaslClientError("invalid SCRAM server-first message")
    salted = salted_password(scram, password, base64.b64decode(fields["s"]), int(fields["i"]))
    without_proof = "c=biws,r=" + fields["r"]
    auth_message = ("%s,%s,%s" % (first_bare, server_first, without_proof)).encode("utf-8")
    client_key = scram.hmac(salted, b"Client Key")
    signature = scram.hmac(scram.hash(client_key), auth_message)
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode("ascii")
    server_final = _authenticate(conn, ("%s,p=%s" % (without_proof, proof)).encode("utf-8")).decode("utf-8")
    expected = base64.b64encode(scram.hmac(scram.hmac(salted, b"Server Key"), auth_message)).decode("ascii")
    if not hmac.compare_digest(server_final, "v=" + expected):
        raise SaslClientError("the broker's SCRAM signature is wrong: it does not know the password")
