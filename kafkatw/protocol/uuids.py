"""Kafka's uuid (topic ids, cluster ids) as the protocol carries it: 16 raw bytes, printed as
22 characters of unpadded base64url. Owns the text form only, not how ids are chosen.
"""

import base64

ZERO_UUID = bytes(16)


def uuid_to_base64(raw):
    """Kafka's printable form of a uuid (base64url, no padding): 22 characters."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def uuid_from_base64(text):
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError("not a uuid: %r" % (text,))
    return raw
