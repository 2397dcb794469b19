"""The source archive: what it carries and that it is reproducible. That
`pip install` of it builds and installs is tools/check_sdist_install.sh's
part (it runs Bazel, so .ci/run runs it outside `bazel test`)."""

import os
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYEXT = os.path.dirname(HERE)
ROOT = os.path.dirname(PYEXT)
TOOLS = os.path.join(ROOT, "tools")


def _sdist():
    (name,) = [f for f in os.listdir(PYEXT) if f.endswith(".tar.gz")]
    return os.path.join(PYEXT, name)


def test_layout_and_metadata():
    with tarfile.open(_sdist()) as tar:
        members = {m.name: m for m in tar.getmembers()}
        prefix = os.path.basename(_sdist())[:-len(".tar.gz")] + "/"
        assert all(name.startswith(prefix) for name in members), sorted(members)[:5]
        names = {name[len(prefix):] for name in members}
        pkg_info = tar.extractfile(prefix + "PKG-INFO").read().decode()
        pyproject = tar.extractfile(prefix + "pyproject.toml").read().decode()
    # What a source build needs: the workspace, every package, the shims
    # Bazel 4.2.3 would otherwise download, the build backend.
    for needed in ("WORKSPACE", ".bazelrc", "version.bzl", "README.md", "BUILD",
                   "runtime/BUILD", "pyext/BUILD", "control/BUILD", "tools/setup.sh",
                   "tools/pep517_backend.py", "tools/repair_wheel.py",
                   "third_party/python_configure.bzl",
                   "third_party/shims/rules_cc/WORKSPACE", "third_party/shims/rules_cc/cc/defs.bzl",
                   "third_party/shims/rules_java/java/defs.bzl",
                   "third_party/shims/rules_proto/proto/defs.bzl",
                   "third_party/shims/remote_coverage_tools/BUILD",
                   "pyext/mt_asyncio/__init__.py", "pyext/src/loop/loop.cc",
                   "control/proto/mt/control/v1/control.proto"):
        assert needed in names, needed
    assert not [n for n in names if n.startswith("bazel-") or "__pycache__" in n
                or n.endswith(".pyc")], sorted(names)
    assert 'build-backend = "pep517_backend"' in pyproject
    assert 'backend-path = ["tools"]' in pyproject
    # PKG-INFO is the wheel's METADATA, from the same function.
    sys.path.insert(0, TOOLS)
    import wheel_builder
    version = prefix.split("-", 1)[1].rstrip("/")
    assert pkg_info == wheel_builder.metadata(version, os.path.join(ROOT, "README.md"))
    # Executable bits survive (setup.sh is run by path).
    setup = members[prefix + "tools/setup.sh"]
    assert setup.mode & 0o111 and setup.mtime == 315532800 and setup.uid == 0


def test_same_sources_give_the_same_bytes(tmp_path):
    with tarfile.open(_sdist()) as tar:
        prefix = tar.getnames()[0].split("/")[0]
        tar.extractall(tmp_path, filter="data")
    # Rebuild from the extracted tree: every regular file but PKG-INFO.
    tree = tmp_path / prefix
    files = sorted(str(p.relative_to(tree)) for p in tree.rglob("*")
                   if p.is_file() and p.name != "PKG-INFO")
    out = tmp_path / "again.tar.gz"
    subprocess.run([sys.executable, os.path.join(TOOLS, "sdist_builder.py"),
                    "--out", str(out), "--version", prefix.split("-", 1)[1],
                    "--readme", "README.md", *files], cwd=tree, check=True)
    with open(_sdist(), "rb") as a, open(out, "rb") as b:
        assert a.read() == b.read()
