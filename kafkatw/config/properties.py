"""Java ``.properties`` files and ``--override key=value`` arguments, read into plain dicts of
strings (the way Java's ``Properties.load`` reads them). Typing and validation are elsewhere.
"""

import re

from kafkatw.config.types import ConfigError

_LINE_SPLIT_RE = re.compile(r"\r\n|\r|\n")
_WHITESPACE = " \t\f"


def _ends_with_odd_backslashes(text):
    count = len(text) - len(text.rstrip("\\"))
    return count % 2 == 1


def _unescape(text, where):
    if "\\" not in text:
        return text
    out = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        i += 1
        if i >= n:
            break
        ch = text[i]
        if ch == "u":
            digits = text[i + 1:i + 5]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError("Malformed \\uxxxx encoding%s" % (where,))
            out.append(chr(int(digits, 16)))
            i += 5
            continue
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(ch, ch))
        i += 1
    return "".join(out)


def _split_key_value(line):
    i = 0
    n = len(line)
    while i < n:
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:" or ch in _WHITESPACE:
            break
        i += 1
    key = line[:i]
    j = i
    while j < n and line[j] in _WHITESPACE:
        j += 1
    if j < n and line[j] in "=:":
        j += 1
        while j < n and line[j] in _WHITESPACE:
            j += 1
    return key, line[j:]


def parse_properties(text, source="<string>"):
    """Parse Java ``.properties`` text into an ordered dict of strings (last duplicate wins).

    Comments start with ``#`` or ``!``; ``key=value``, ``key: value`` and ``key value`` forms;
    a line ending in an odd number of backslashes continues on the next line (leading white
    space of the continuation dropped); ``\\t \\n \\r \\f \\uXXXX`` escapes; other ``\\c`` is ``c``.
    """
    props = {}
    lines = _LINE_SPLIT_RE.split(text)
    i = 0
    while i < len(lines):
        lineno = i + 1
        logical = lines[i].lstrip(_WHITESPACE)
        i += 1
        if not logical or logical[0] in "#!":
            continue
        while _ends_with_odd_backslashes(logical):
            logical = logical[:-1]
            if i >= len(lines):
                break
            logical += lines[i].lstrip(_WHITESPACE)
            i += 1
        key, value = _split_key_value(logical)
        where = " in %s line %d" % (source, lineno)
        props[_unescape(key, where)] = _unescape(value, where)
    return props


def read_properties_file(path):
    """Read a ``.properties`` file (UTF-8, falling back to ISO-8859-1 as Java reads it)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError("Cannot read config file %s: %s" % (path, e.strerror or e))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    return parse_properties(text, path)


def parse_override(text):
    """``key=value`` (split at the first ``=``) -> (key, value); the key is stripped."""
    key, sep, value = str(text).partition("=")
    if not sep or not key.strip():
        raise ConfigError("Invalid override %r: expected key=value" % (text,))
    return key.strip(), value

