"""The benchmark instrument: kafkatw against Tansu (a Rust Kafka-compatible broker) and the
machine's own limits, driven by confluent-kafka. ``python -m bench [--quick]``.

Owns broker start-up for benchmarking, workloads, interleaved rounds and the report; it does
not tune or assert anything (no timed tests live here).
"""
