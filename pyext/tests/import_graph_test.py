"""No import circle in the mt_asyncio package.

Walks every module's source (not the running interpreter's sys.modules):
each relative or absolute import of a package module is an edge, late
imports inside functions included, and `from . import name` where `name`
is not a submodule is an edge to the package's __init__. A cycle fails the
test with the modules on it. The extensions (_core, _control) import
nothing of the package and are leaves.
"""

import ast
import os

import mt_asyncio

PACKAGE = "mt_asyncio"
ROOT = os.path.dirname(os.path.abspath(mt_asyncio.__file__))
# The extension modules: leaves. _control is built in //control, into a
# second mt_asyncio folder in a source tree (the wheel has both in one).
EXTENSIONS = {f"{PACKAGE}._core", f"{PACKAGE}._control"}


def _modules():
    """{dotted name: path} for every .py file of the package."""
    found = {}
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(folder, ROOT)
        parts = [PACKAGE] + ([] if rel == "." else rel.split(os.sep))
        for name in files:
            if not name.endswith(".py"):
                continue
            stem = name[:-3]
            dotted = ".".join(parts if stem == "__init__" else parts + [stem])
            found[dotted] = os.path.join(folder, name)
    return found


def _package_of(module, path):
    return module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]


def _imports(module, path, modules):
    """The package modules `module` imports, anywhere in its source."""
    tree = ast.parse(open(path).read(), path)
    package = _package_of(module, path)
    edges = set()

    def resolve(base, names):
        for name in names:
            candidate = f"{base}.{name}" if name != "*" else base
            if candidate in EXTENSIONS:
                continue  # A leaf: imports nothing of the package.
            if candidate in modules:
                edges.add(candidate)  # A submodule.
            elif base in modules:
                edges.add(base)  # A name defined in `base` itself.

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base == PACKAGE or base.startswith(PACKAGE + "."):
                resolve(base, [alias.name for alias in node.names])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    edges.add(alias.name)
    edges.discard(module)
    return edges


def _graph():
    modules = _modules()
    return {m: _imports(m, p, modules) for m, p in modules.items()}


def _cycles(graph):
    """Every strongly connected component with more than one module, or a
    module importing itself (Tarjan's algorithm)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_the_walk_sees_the_package():
    graph = _graph()
    assert "mt_asyncio._loop.connections" in graph
    # Late and relative imports are edges: the package's __init__ imports
    # control inside a function; the loop's connections import their
    # sibling servers and, from the package above, tasks.
    assert "mt_asyncio.control" in graph["mt_asyncio"]
    assert "mt_asyncio._loop.servers" in graph["mt_asyncio._loop.connections"]
    assert "mt_asyncio.tasks" in graph["mt_asyncio._loop.connections"]


def test_no_import_cycle():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_a_cycle_is_found():
    # The checker itself, on a made-up graph with one circle through three.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
