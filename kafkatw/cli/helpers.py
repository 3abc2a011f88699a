"""What the ``kafkatw`` command modules share: aligned tables and a progress bar on the
terminal, and ``key=value`` argument parsing. Knows no command and no broker.
"""

import sys

from kafkatw.cli.client import UsageError


def print_table(headers, rows, out=None):
    """Rows of strings under ``headers``, columns left-aligned and separated by two spaces."""
    out = out or sys.stdout
    rows = [["" if c is None else str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    for row in [list(headers)] + rows:
        out.write("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() + "\n")


class Progress:
    """A one-line progress bar on stderr when ``enabled`` (see ``output.progress_wanted``)."""

    def __init__(self, enabled, total=None, label="", stream=None):
        self.total = total
        self.label = label
        self.count = 0
        self.stream = stream or sys.stderr
        self.enabled = enabled

    def update(self, n=1):
        self.count += n
        if not self.enabled:
            return
        if self.total:
            width = 30
            done = int(width * min(self.count, self.total) / self.total)
            bar = "[%s%s] %d/%d" % ("#" * done, "." * (width - done), self.count, self.total)
        else:
            bar = "%d" % self.count
        self.stream.write("\r%s %s" % (self.label, bar))
        self.stream.flush()

    def close(self):
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def parse_kv(items, what="property"):
    """``["k=v", ...]`` -> dict; values may contain '=' and ','."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError("invalid %s %r (expected key=value)" % (what, item))
        out[key.strip()] = value
    return out
