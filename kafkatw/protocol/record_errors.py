"""The two ways record bytes can be wrong, shared by the batch layout (records.py) and the
codecs (compression.py) so that neither imports the other for them. Owns nothing else;
``kafkatw.protocol.records`` re-exports both names.
"""

from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError


class CorruptRecordError(KafkaError):
    """Bytes that are not a well-formed record batch (Kafka's CorruptRecordException)."""

    def __init__(self, message=None):
        super().__init__(errors.CORRUPT_MESSAGE, message)


class InvalidRecordError(KafkaError):
    """A well-formed batch whose contents break Kafka's rules (InvalidRecordException)."""

    def __init__(self, message=None):
        super().__init__(errors.INVALID_RECORD, message)
