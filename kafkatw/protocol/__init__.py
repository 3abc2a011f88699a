"""Wire formats: the generated message codec, record batches, file regions, error codes.

This package imports nothing else of the broker.
"""
