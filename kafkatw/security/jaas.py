"""Kafka's ``sasl.jaas.config`` syntax: ``<LoginModule> <flag> key="value" ...;`` entries.

Owns parsing the text into :class:`JaasEntry` values (Kafka's ``JaasConfig``); the meaning of
the options belongs to each mechanism. Errors never repeat option values (they hold passwords).
"""

import re

import attr

FLAGS = ("required", "requisite", "sufficient", "optional")

_TOKEN = re.compile(r'\s*(?:(?P<quoted>"(?:[^"\\]|\\.)*")|(?P<punct>[=;])|(?P<word>[^\s=;"]+))', re.S)


class JaasError(ValueError):
    """The text is not valid JAAS; the message names the position, not the values."""


@attr.s(frozen=True)
class JaasEntry:
    """One login module: its class name, control flag (lower case) and options."""

    login_module = attr.ib()
    flag = attr.ib()
    options = attr.ib(factory=dict)

    @property
    def module_name(self):
        """The login module's class name without its package (``PlainLoginModule``)."""
        return self.login_module.rsplit(".", 1)[-1]


def _tokens(text):
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise JaasError("Invalid JAAS config: unexpected character at position %d" % (pos,))
        pos = m.end()
        if m.group("quoted") is not None:
            yield "value", re.sub(r"\\(.)", r"\1", m.group("quoted")[1:-1])
        elif m.group("punct") is not None:
            yield m.group("punct"), m.group("punct")
        else:
            yield "word", m.group("word")


def parse_jaas_config(text):
    """``[JaasEntry]`` of ``text``; raises :class:`JaasError` (one line) if it is malformed."""
    if text is None or not str(text).strip():
        raise JaasError("Invalid JAAS config: no login module")
    tokens = list(_tokens(str(text)))
    entries = []
    i = 0
    while i < len(tokens):
        kind, module = tokens[i]
        if kind != "word":
            raise JaasError("Invalid JAAS config: expected a login module class name")
        if i + 1 >= len(tokens) or tokens[i + 1][0] != "word" or tokens[i + 1][1].lower() not in FLAGS:
            raise JaasError("Invalid JAAS config: login module %s needs a control flag (%s)"
                            % (module, ", ".join(FLAGS)))
        flag = tokens[i + 1][1].lower()
        i += 2
        options = {}
        while True:
            if i >= len(tokens):
                raise JaasError("Invalid JAAS config: the entry of %s does not end with ';'" % (module,))
            kind, value = tokens[i]
            if kind == ";":
                i += 1
                break
            if kind != "word":
                raise JaasError("Invalid JAAS config: expected an option name in the entry of %s" % (module,))
            if i + 2 >= len(tokens) or tokens[i + 1][0] != "=" or tokens[i + 2][0] not in ("word", "value"):
                raise JaasError("Invalid JAAS config: option %s of %s needs =value" % (value, module))
            options[value] = tokens[i + 2][1]
            i += 3
        entries.append(JaasEntry(module, flag, options))
    return entries
