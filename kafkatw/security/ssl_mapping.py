"""Kafka's ``ssl.principal.mapping.rules``: a certificate's distinguished name -> a user name.

Owns parsing the rule list (``DEFAULT`` and ``RULE:pattern/replacement/[LU]``, comma-separated)
and applying it (first rule whose pattern matches the whole DN wins; ``$n`` in the replacement
names a group), as Kafka's ``SslPrincipalMapper``. Patterns are Python regular expressions,
which agree with Java's for the usual rules.
"""

import re

import attr

_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\\(.)|\$(\d+)")


class NoMatchingRule(ValueError):
    """No rule applies to a distinguished name (the connection is refused)."""


@attr.s(frozen=True)
class Rule:
    pattern = attr.ib(default=None)  # None: DEFAULT
    replacement = attr.ib(default=None)
    case = attr.ib(default="")  # "L", "U" or ""

    def __str__(self):
        if self.pattern is None:
            return "DEFAULT"
        return "RULE:%s/%s/%s" % (self.pattern.pattern, self.replacement, self.case)

    def apply(self, dn):
        if self.pattern is None:
            return dn
        m = self.pattern.fullmatch(dn)
        if m is None:
            return None
        groups = self.pattern.groups

        def expand(match):
            def one(ref):
                if ref.group(1) is not None:
                    return ref.group(1)
                n = int(ref.group(2))
                return (match.group(n) or "") if n <= groups else ref.group(0)
            return _BACK_REFERENCE.sub(one, self.replacement)

        result = self.pattern.sub(expand, dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def parse_rules(text):
    """The :class:`Rule` list of ``text``; raises ValueError (one line) on an invalid rule."""
    text = "DEFAULT" if text is None else text.strip()
    rules = []
    for m in _SPLITTER.finditer(text):
        rule = m.group(1)
        if m.end() == m.start():
            break
        p = _PARSER.match(rule)
        if p is None or p.end() != len(rule):
            raise ValueError("Invalid rule: `%s`" % (rule,))
        if p.group(1) is not None:
            rules.append(Rule())
        elif p.group(2) is not None:
            try:
                pattern = re.compile(p.group(2))
            except re.error as e:
                raise ValueError("Invalid rule: `%s`: %s" % (rule, e)) from None
            rules.append(Rule(pattern, p.group(3), p.group(4)))
        elif p.group(5):
            raise ValueError("Invalid rule: `%s`" % (rule,))
    return rules


class SslPrincipalMapper:
    """Maps a DN (RFC 2253 string) to a name with the first applicable rule."""

    def __init__(self, rules="DEFAULT"):
        self.rules = parse_rules(rules)

    def name(self, dn):
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRule("No rules apply to %s, rules [%s]" % (dn, ", ".join(str(r) for r in self.rules)))
