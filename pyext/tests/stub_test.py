"""mt_asyncio/_core.pyi against the built extension: every name the
extension has is in the stub and every name in the stub is in the
extension; each class's members likewise. py.typed ships beside it."""

import ast
import inspect
import os

import mt_asyncio
from mt_asyncio import _core

PACKAGE_DIR = os.path.dirname(os.path.abspath(mt_asyncio.__file__))
STUB = os.path.join(PACKAGE_DIR, "_core.pyi")
# The stub's own helpers: a type variable, an alias, shared base classes.
STUB_ONLY = {"_T", "_Callback", "_TransportBase", "_Acquirable", "_TlsSpec"}
# Dunders a stub declares when the type implements them.
DUNDERS = {"__init__", "__await__", "__iter__", "__del__", "__aenter__",
           "__aexit__", "__class_getitem__"}


def _stub():
    """{name: None for a function or value, {member names} for a class},
    and {class: [stub base names]}."""
    tree = ast.parse(open(STUB).read(), STUB)
    names, bases = {}, {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign):
                    members.add(item.target.id)
            names[node.name] = members
            bases[node.name] = [
                (b.value if isinstance(b, ast.Subscript) else b).id
                for b in node.bases
                if isinstance(b.value if isinstance(b, ast.Subscript) else b, ast.Name)]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = None
        elif isinstance(node, ast.AnnAssign):
            names[node.target.id] = None
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names[target.id] = None
    return names, bases


def _declared(cls, names, bases):
    """A stub class's members with those of its stub bases."""
    out = set(names[cls])
    for base in bases[cls]:
        if base in names and names[base] is not None:
            out |= _declared(base, names, bases)
    return out


def _runtime_members(cls):
    return {name for name in vars(cls) if not name.startswith("__") or name in DUNDERS}


def test_module_names_match():
    names, _ = _stub()
    runtime = {n for n in dir(_core) if not n.startswith("__")}
    assert runtime - set(names) == set(), "in _core, not in the stub"
    assert set(names) - STUB_ONLY - runtime == set(), "in the stub, not in _core"


def test_kinds_match():
    names, _ = _stub()
    for name in set(names) - STUB_ONLY:
        is_class = inspect.isclass(getattr(_core, name))
        assert is_class == (names[name] is not None), name


def test_class_members_match():
    names, bases = _stub()
    problems = []
    for name, members in names.items():
        if members is None or name in STUB_ONLY:
            continue
        cls = getattr(_core, name)
        declared = _declared(name, names, bases)
        missing = _runtime_members(cls) - declared
        extra = {m for m in declared if not hasattr(cls, m)}
        if missing:
            problems.append(f"{name}: not in the stub: {sorted(missing)}")
        if extra:
            problems.append(f"{name}: not on the type: {sorted(extra)}")
    assert not problems, "\n".join(problems)


def test_py_typed_ships():
    assert os.path.isfile(os.path.join(PACKAGE_DIR, "py.typed"))
