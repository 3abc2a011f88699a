"""The broker's operations endpoint: Prometheus metrics, /healthz and /readyz over HTTP.

Owns reading the running broker's components into metric families named as the Prometheus JMX
exporter's Kafka rules name Kafka's MBeans (:mod:`kafkatw.metrics.exporter`) and the HTTP
resources and their service (:mod:`kafkatw.metrics.web`). It counts nothing itself: the
counters live with the components (network metrics, topic stats, purgatories).
"""
