"""SASL listeners against a real broker process: start-up checks (fail closed)."""

from twisted.trial.unittest import SynchronousTestCase

from kafkatw.testing import BrokerStartError, KafkaBroker


class FailClosedTests(SynchronousTestCase):
    """A SASL listener is never served without authentication."""

    def assertRefused(self, broker, expected):
        self.addCleanup(broker.close)
        with self.assertRaises(BrokerStartError) as cm:
            broker.start()
        self.assertIn(expected, cm.exception.reason)
        self.assertNotIn("\n", cm.exception.reason)

    def test_sasl_plaintext_without_sasl_config_is_refused(self):
        self.assertRefused(KafkaBroker(listeners=("PLAINTEXT", "SASL_PLAINTEXT")),
                           "Listener SASL_PLAINTEXT uses SASL_PLAINTEXT")

    def test_sasl_ssl_without_sasl_config_is_refused(self):
        self.assertRefused(KafkaBroker(listeners=("SASL_SSL",)), "Listener SASL_SSL uses SASL_SSL")
