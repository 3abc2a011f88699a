"""Request handlers, one module per API family. Each module exposes ``API_KEY``, ``VERSIONS``,
``handle(apis, request)`` and ``error_response(request, code, message)`` (see ``server.apis``).
"""
