"""The feature flags (KIP-584) this broker reports in ApiVersions v3+, and Kafka's rules turning
the table into the SupportedFeatures / FinalizedFeatures lists. It does not decide who gets them
(the ApiVersions handler's old-librdkafka guard) and offers no UpdateFeatures.

Kafka 4.0.0 on a freshly formatted combined node supports metadata.version 7-25 (3.3-IV3 to
4.0-IV3), kraft.version, group.version, eligible.leader.replicas.version 0-1 and
transaction.version 0-2, and finalizes metadata.version 25, group.version 1, transaction.version 2.
We keep metadata.version and group.version (KIP-848 consumer groups) as 4.0 has them but cap the
others at 0: level 1+ promises what we do not serve (KIP-890 transactions, a KRaft quorum, ELR), and Kafka lists
no feature whose supported max is 0 nor any finalized at level 0, so they are simply absent.
"""

import attr

# Kafka's metadata.version levels (MetadataVersion.java, 4.0 branch).
METADATA_VERSION_MINIMUM = 7  # IBP_3_3_IV3, MetadataVersion.MINIMUM_VERSION
METADATA_VERSION_4_0_IV3 = 25  # MetadataVersion.LATEST_PRODUCTION in 4.0.0

# Kafka reports the metadata log's offset here, which only grows; it orders snapshots of the
# finalized levels. Ours never change (no UpdateFeatures; one node), so one constant is just as
# monotonic, across requests and restarts. An UpdateFeatures must persist and raise it.
FINALIZED_FEATURES_EPOCH = 0


@attr.s(frozen=True)
class BrokerFeature:
    """One feature: the levels we support and finalize, beside what Kafka 4.0.0 has."""

    name = attr.ib()
    min_level = attr.ib()
    max_level = attr.ib()  # ours
    finalized_level = attr.ib()  # ours
    kafka_max_level = attr.ib()  # Kafka 4.0.0's supported max (its latestProduction)
    kafka_finalized_level = attr.ib()  # Kafka 4.0.0's default on a fresh format


FEATURES = (
    BrokerFeature("metadata.version", METADATA_VERSION_MINIMUM, METADATA_VERSION_4_0_IV3,
                  METADATA_VERSION_4_0_IV3, METADATA_VERSION_4_0_IV3, METADATA_VERSION_4_0_IV3),
    # 1 = dynamic quorum (KIP-853); Kafka finalizes 1 only when formatted with one.
    BrokerFeature("kraft.version", 0, 0, 0, 1, 0),
    # 1 = KIP-848 consumer groups (ConsumerGroupHeartbeat), finalized as Kafka 4.0 does.
    BrokerFeature("group.version", 0, 1, 1, 1, 1),
    # 1-2 = KIP-890 transactions (2 = epoch bump per transaction): we have no transactions.
    BrokerFeature("transaction.version", 0, 0, 0, 2, 2),
    # 1 = eligible leader replicas (KIP-966); Kafka 4.0 finalizes 0 (it bootstraps at 4.1-IV0).
    BrokerFeature("eligible.leader.replicas.version", 0, 0, 0, 1, 0),
)


def without_consumer_groups(features=FEATURES):
    """The table for a broker whose ``group.coordinator.rebalance.protocols`` leaves out
    ``consumer``: group.version at 0 (absent from both lists), so no client is told KIP-848
    groups are served where ConsumerGroupHeartbeat is not."""
    return tuple(attr.evolve(f, max_level=0, finalized_level=0) if f.name == "group.version" else f
                 for f in features)


def supported_features(features=FEATURES):
    """``[(name, min, max)]`` as Kafka's BrokerFeatures lists them: no feature whose max is 0."""
    return [(f.name, f.min_level, f.max_level) for f in features if f.max_level > 0]


def finalized_features(features=FEATURES):
    """``[(name, min_level, max_level)]`` as Kafka's ApiVersionsResponse writes them: level 0
    left out, min and max both the level."""
    return [(f.name, f.finalized_level, f.finalized_level) for f in features if f.finalized_level != 0]
