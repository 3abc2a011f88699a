"""The package imports and the generated error table agrees with errors.tsv's shape."""

from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.protocol.parts import FileRegion, join_parts, parts_size


class ErrorTableTests(unittest.SynchronousTestCase):
    def test_known_codes(self):
        self.assertEqual(errors.NONE, 0)
        self.assertEqual(errors.OFFSET_OUT_OF_RANGE, 1)
        self.assertEqual(errors.UNKNOWN_TOPIC_OR_PARTITION, 3)
        self.assertEqual(errors.ERRORS[-1].name, "UNKNOWN_SERVER_ERROR")
        self.assertTrue(errors.ERRORS[errors.CORRUPT_MESSAGE].retriable)
        self.assertFalse(errors.ERRORS[errors.OFFSET_OUT_OF_RANGE].retriable)

    def test_unknown_code_name(self):
        self.assertEqual(errors.error_name(9999), "UNKNOWN(9999)")

    def test_kafka_error_str(self):
        self.assertEqual(str(errors.KafkaError(2, "bad crc")), "CORRUPT_MESSAGE: bad crc")


class PartsTests(unittest.SynchronousTestCase):
    def test_join_reads_regions(self):
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(b"0123456789")
        with open(path, "rb") as f:
            parts = [b"ab", FileRegion(f, 3, 4), b"z"]
            self.assertEqual(parts_size(parts), 7)
            self.assertEqual(join_parts(parts), b"ab3456z")
