"""pytest fixtures for a real kafkatw broker (loaded through the ``pytest11`` entry point).

Owns only fixture scopes and options: ``kafka_broker`` (one per test, options from the
``kafka_broker`` marker), ``kafka_broker_session`` (one per run, options from the overridable
``kafka_broker_session_options`` fixture) and ``kafka_broker_factory``. Starting and stopping
brokers belongs to :class:`kafkatw.testing.KafkaBroker`.
"""

import pytest

from kafkatw.testing import KafkaBroker


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "kafka_broker(**options): KafkaBroker keywords (overrides, num_partitions, topics, "
        "listeners, ...) for the kafka_broker fixture of this test")


@pytest.fixture
def kafka_broker(request):
    """A fresh broker for this test (empty data), closed after it."""
    marker = request.node.get_closest_marker("kafka_broker")
    options = dict(marker.kwargs) if marker is not None else {}
    with KafkaBroker(**options) as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_broker_session_options():
    """KafkaBroker keywords for ``kafka_broker_session``; override it in a conftest.py."""
    return {}


@pytest.fixture(scope="session")
def kafka_broker_session(kafka_broker_session_options):
    """One broker shared by the whole test run (use distinct topic names per test)."""
    with KafkaBroker(**kafka_broker_session_options) as broker:
        yield broker


@pytest.fixture
def kafka_broker_factory():
    """``make(**options) -> running KafkaBroker``; every broker made is closed after the test."""
    brokers = []

    def make(**options):
        broker = KafkaBroker(**options)
        brokers.append(broker)
        return broker.start()

    yield make
    for broker in brokers:
        broker.close()
