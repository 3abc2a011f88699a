"""The one thing setup.cfg cannot declare: the optional compiled step of the record walk
(``kafkatw/protocol/_recwalk.c``). ``optional=True``: where it does not build (no C compiler,
no Python headers) the install goes on and ``records.py`` uses its pure-Python walk."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kafkatw.protocol._recwalk", ["kafkatw/protocol/_recwalk.c"],
                             optional=True)])
