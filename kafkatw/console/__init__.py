"""The built-in web console (``kafkatw.console.listener``): pages for the cluster, topics,
partitions, consumer groups and messages, and admin actions, served by ``twisted.web`` from the
broker's own reactor.

It keeps no broker state of its own: every read and action is a Kafka request handed to the
broker's ``KafkaApis`` in process (:mod:`.client`) for the console user's principal, so the same
handlers and the same ``IAuthorizer`` decide. Imported only when the listener is configured.
"""
