"""The contract between the network layer and whoever handles requests.

The network layer decodes a frame into a :class:`kafkatw.network.request.Request`,
hands it to an :class:`IRequestHandler` and writes the :class:`Response` it gets back.
"""

from zope.interface import Interface


class IRequestHandler(Interface):
    """Handles decoded requests (Kafka's ``KafkaApis.handle``)."""

    def api_versions():
        """Return ``{api_key: (min_version, max_version)}`` this broker supports.

        The network layer uses it to reject unknown APIs/versions before decoding the
        body, and to answer an ApiVersions request of an unsupported version. It asks once
        and keeps the dict: return the same one every time, updated in place if what is
        served changes.
        """

    def handle(request):
        """Handle one ``Request``; return a ``Deferred`` firing with a ``Response``.

        An errback (or a raised exception) closes that connection, as Kafka does for an
        unexpected handler failure.  The handler runs on the reactor thread; any blocking
        work is the handler's concern (``deferToThreadPool``).
        """

    def handle_now(request):
        """What the request channel calls: :meth:`handle` without a Deferred where it can.

        Returns the ``Response`` itself when it is ready at once, else a pending answer: an
        object with ``when_complete(callback, errback)`` that calls one of them once (a Fetch
        parked in the purgatory: answered by the append that completes it, with no Deferred;
        a Deferred is taken too and wrapped in a ``request.DeferredAnswer``). A handler with
        nothing to gain returns ``handle(request)``.
        """
