"""The broker's request-serving side: API dispatch and handlers, the replica manager, the
purgatory of delayed operations and the fetch-session cache. Storage lives in
:mod:`kafkatw.storage`; sockets in :mod:`kafkatw.network`."""
