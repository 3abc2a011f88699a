"""Import directions: every import in ``kafkatw/`` (function-level ones included) follows the
layer table of docs/architecture.md, and no modules import each other around a loop.

The modules are read with ``ast``, never imported, so a module that would fail to import
still gets checked and nothing runs at import time."""

import ast
import os
import re

from twisted.trial import unittest

import kafkatw

PACKAGE_DIR = os.path.dirname(os.path.abspath(kafkatw.__file__))
ARCHITECTURE = os.path.join(os.path.dirname(PACKAGE_DIR), "docs", "architecture.md")



def module_files(package_dir=PACKAGE_DIR):
    """``{dotted module name: path}`` of every module under kafkatw/."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(package_dir):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        rel = os.path.relpath(dirpath, os.path.dirname(package_dir))
        package = rel.replace(os.sep, ".")
        for name in filenames:
            if not name.endswith(".py"):
                continue
            found[package if name == "__init__.py" else package + "." + name[:-3]] = \
                os.path.join(dirpath, name)
    return found


def imports_of(module, path, modules):
    """The kafkatw modules ``module`` imports anywhere in its body.

    ``from pkg import sub`` depends on ``pkg.sub`` (and not on ``pkg``'s own names);
    ``from pkg import name`` on ``pkg``."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                if node.module:
                    base += "." + node.module
            else:
                base = node.module
            for alias in node.names:
                sub = base + "." + alias.name
                found.add(sub if sub in modules else base)
    return {name for name in found if name in modules and name != module}


_GRAPH = {}


def import_graph(package_dir=PACKAGE_DIR):
    """``{module: set of kafkatw modules it imports}``; parsed once per run (the generated
    codec is large)."""
    graph = _GRAPH.get(package_dir)
    if graph is None:
        modules = module_files(package_dir)
        graph = _GRAPH[package_dir] = {m: imports_of(m, path, modules) for m, path in modules.items()}
    return graph


def layer_of(module, layers):
    """The table row owning ``module``: its longest prefix among the table's packages."""
    best = None
    for name in layers:
        if (module == name or module.startswith(name + ".")) and (best is None or len(name) > len(best)):
            best = name
    return best


SHARED = "every layer may import"


def layer_table(path=ARCHITECTURE):
    """``{package: set of packages (or single modules) it may import, or None for everything}``
    from the table under "Imports run one way"."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Imports run one way", 1)[1].split("\n## ", 1)[0]
    layers = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`kafkatw"):
            continue
        owners = re.findall(r"`(kafkatw[\w.]*)`", cells[0])
        if cells[1].startswith("everything"):
            allowed = None
        elif SHARED in cells[1]:
            allowed = {SHARED}  # a leaf: imports nothing of the broker, imported by anyone
        else:
            allowed = set(re.findall(r"`(kafkatw[\w.]*)`", cells[1]))
        for owner in owners:
            layers[owner] = allowed
    return layers


def find_cycles(graph):
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, cycles = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def upward_imports(graph, layers):
    """``[(module, imported module)]`` that the layer table does not allow."""
    shared = {name for name, allowed in layers.items() if allowed == {SHARED}}
    bad = []
    for module, deps in sorted(graph.items()):
        own = layer_of(module, layers)
        if own is None or own == "kafkatw":
            continue
        allowed = layers[own]
        for dep in sorted(deps):
            theirs = layer_of(dep, layers)
            if theirs == own or allowed is None or dep == "kafkatw" or theirs in shared:
                continue
            if theirs in allowed:
                continue
            if any(dep == name or dep.startswith(name + ".") for name in allowed):
                continue  # a row may allow single modules of a package (storage: config.topic)
            bad.append((module, dep))
    return bad


class ImportGraphTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.graph = import_graph()
        self.layers = layer_table()

    def test_graph_sees_known_edges(self):
        """The parser finds what is there (a test of the test): relative, from- and
        function-level imports."""
        self.assertIn("kafkatw.protocol.compression", self.graph["kafkatw.protocol.records"])
        self.assertIn("kafkatw.storage.log", self.graph["kafkatw.storage"])
        self.assertIn("kafkatw.purgatory", self.graph["kafkatw.server.replica_manager"]
                      | self.graph["kafkatw.server.delayed_fetch"])
        self.assertIn("kafkatw.cli.topics", self.graph["kafkatw.cli.main"])

    def test_no_cycles(self):
        self.assertEqual(find_cycles(self.graph), [])

    def test_cycle_finder_finds_one(self):
        graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
        self.assertEqual(find_cycles(graph), [["a", "b", "c"]])

    def test_every_package_has_a_row(self):
        missing = sorted({m for m in self.graph if layer_of(m, self.layers) is None} - {"kafkatw"})
        self.assertEqual(missing, [], "add these to the table in docs/architecture.md")

    def test_no_upward_imports(self):
        self.assertEqual(upward_imports(self.graph, self.layers), [])

    def test_table_rejects_an_upward_import(self):
        graph = {"kafkatw.storage.log": {"kafkatw.server.apis"},
                 "kafkatw.server.apis": {"kafkatw.storage.log"},
                 "kafkatw.storage.config": {"kafkatw.config.topic", "kafkatw.config.broker"}}
        self.assertEqual(upward_imports(graph, self.layers),
                         [("kafkatw.storage.config", "kafkatw.config.broker"),
                          ("kafkatw.storage.log", "kafkatw.server.apis")])

    def test_protocol_and_cli_rows(self):
        self.assertEqual(self.layers["kafkatw.protocol"], set())
        self.assertEqual(self.layers["kafkatw.cli"],
                         {"kafkatw.protocol", "kafkatw.config", "kafkatw.security"})
        self.assertIsNone(self.layers["kafkatw.service"])

    def test_shared_leaves_import_nothing(self):
        graph = {"kafkatw.storage.log": {"kafkatw.rate"}, "kafkatw.rate": {"kafkatw.protocol.errors"}}
        self.assertEqual(upward_imports(graph, self.layers), [("kafkatw.rate", "kafkatw.protocol.errors")])
