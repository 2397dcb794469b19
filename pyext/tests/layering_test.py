"""The package map of pyext/src, checked against the sources and the BUILD
files: every `#include "pyext/src/<pkg>/..."` and every dependency on
`//pyext/src/<pkg>` follows an allowed arrow, and each package's
visibility names exactly the packages allowed above it.

Bazel enforces the same thing from the other side (a package that depends
on one whose visibility leaves it out fails to build, and a header used
without a dependency is an undeclared inclusion: tools/check_layering.sh
shows the first on a probe target); this test says which arrow was broken
and where, and keeps docs/architecture.md's map honest.
"""

import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")

# Each package and the packages it may use (the arrows of
# docs/architecture.md's map). The module init, src/core_module.cc in
# //pyext, may use every package.
ALLOWED = {
    "common": set(),
    "future": {"common"},
    "sync": {"common", "future"},
    "loop": {"common", "future"},
    "net": {"common", "future", "loop"},
    "admin": {"common"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"pyext/src/([a-z_]+)/[^"]+"', re.M)
DEP = re.compile(r'"//pyext/src/([a-z_]+)(?::[a-z_]+)?"')
VISIBLE_TO = re.compile(r'"//pyext/src/([a-z_]+):__pkg__"')


def _packages():
    return sorted(name for name in os.listdir(SRC)
                  if os.path.isfile(os.path.join(SRC, name, "BUILD")))


def _sources(package):
    folder = os.path.join(SRC, package)
    for name in sorted(os.listdir(folder)):
        if name.endswith((".h", ".cc")):
            yield name, open(os.path.join(folder, name)).read()


def _cc_library_blocks(build_text):
    """Each cc_library's text, up to the next top-level rule."""
    return re.findall(r"^cc_library\((.*?)^\)", build_text, re.M | re.S)


def test_every_package_is_on_the_map():
    assert _packages() == sorted(ALLOWED)
    # No source left flat in src/ but the module init.
    flat = [n for n in os.listdir(SRC) if n.endswith((".h", ".cc"))]
    assert flat == ["core_module.cc"], flat


def test_the_map_has_no_cycle():
    def reaches(start, goal, seen=()):
        return any(dep == goal or (dep not in seen and reaches(dep, goal, seen + (dep,)))
                   for dep in ALLOWED[start])
    assert not [p for p in ALLOWED if reaches(p, p)]


def test_includes_follow_the_arrows():
    broken = []
    for package in _packages():
        for name, text in _sources(package):
            for used in INCLUDE.findall(text):
                if used != package and used not in ALLOWED[package]:
                    broken.append(f"pyext/src/{package}/{name} includes {used}/")
    assert not broken, "\n".join(broken)


def test_build_deps_follow_the_arrows():
    broken = []
    for package in _packages():
        build = open(os.path.join(SRC, package, "BUILD")).read()
        for block in _cc_library_blocks(build):
            deps = block.split("deps", 1)[1] if "deps" in block else ""
            for used in DEP.findall(deps):
                if used != package and used not in ALLOWED[package]:
                    broken.append(f"//pyext/src/{package} depends on //pyext/src/{used}")
    assert not broken, "\n".join(broken)


def test_visibility_names_exactly_the_packages_above():
    above = {p: {q for q, deps in ALLOWED.items() if p in deps} for p in ALLOWED}
    for package in _packages():
        if package == "common":
            continue  # The bottom: visible to every package (__subpackages__).
        build = open(os.path.join(SRC, package, "BUILD")).read()
        for block in _cc_library_blocks(build):
            visibility = block.split("visibility", 1)[1].split("]", 1)[0]
            assert "//pyext:__pkg__" in visibility, package
            assert set(VISIBLE_TO.findall(visibility)) == above[package], package


def test_a_violation_is_caught(tmp_path):
    # The checker itself: an include of loop/ from future/ is reported.
    text = '#include "pyext/src/loop/loop.h"\n'
    used = INCLUDE.findall(text)
    assert used == ["loop"] and "loop" not in ALLOWED["future"]
