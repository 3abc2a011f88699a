"""kafkatw's own drop-in plug-ins (Twisted's plug-in system).

Each module here exposes :class:`kafkatw.registry.PluginDescriptor` objects; ``getPlugins``
finds them, and finds third-party ones in any ``kafkatw/plugins`` directory on ``sys.path``
(``pluginPackagePaths``) and in ``twisted/plugins``. Nothing here imports an implementation.
"""

from twisted.plugin import pluginPackagePaths

__path__.extend(pluginPackagePaths(__name__))
__all__ = []
