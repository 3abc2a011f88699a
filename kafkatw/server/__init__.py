"""The broker's request-serving side: API dispatch and handlers, the replica manager, the
delayed fetch and the fetch-session cache. Storage lives in :mod:`kafkatw.storage`, sockets in
:mod:`kafkatw.network`, the purgatory mechanism in :mod:`kafkatw.purgatory`."""
