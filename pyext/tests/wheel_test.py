"""The wheel a user installs: its name, tags and metadata, `auditwheel
show`, and the install page's commands (docs/install.md) with the README's
first program run word for word in a fresh venv inside a mount namespace
where the build machine's Abseil, gRPC, protobuf and BoringSSL libraries
cannot be seen."""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile

import pytest

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
HERE = os.path.dirname(os.path.abspath(__file__))
PYEXT = os.path.dirname(HERE)
README = os.path.join(os.path.dirname(PYEXT), "README.md")
INSTALL_PAGE = os.path.join(os.path.dirname(PYEXT), "docs", "install.md")

# The system libraries the plain wheel links by soname, hidden in the
# namespace (Debian's multiarch folder; BoringSSL from android-libboringssl).
# OpenSSL's libssl/libcrypto stay visible because the interpreter's own ssl
# module loads them; the ldd check shows the wheel's files use their copy.
HIDDEN_PATTERNS = ("libabsl_*", "libgrpc*", "libgpr*", "libprotobuf*", "libprotoc*",
                   "libupb*", "libaddress_sorting*", "libre2*", "libcares*",
                   "android/libssl*", "android/libcrypto*")


def _wheel_path():
    wheels = [f for f in os.listdir(PYEXT) if f.endswith(".whl")]
    assert len(wheels) == 1, wheels
    return os.path.join(PYEXT, wheels[0])


def _read(name):
    with zipfile.ZipFile(_wheel_path()) as whl:
        return whl.read(name).decode()


def _dist_info():
    return f"mt_asyncio-{_version()}.dist-info"


def _version():
    with zipfile.ZipFile(_wheel_path()) as whl:
        source = whl.read("mt_asyncio/__init__.py").decode()
    return re.search(r'^__version__ = "([^"]+)"', source, re.M).group(1)


def _glibc_platform():
    libc, version = os.confstr("CS_GNU_LIBC_VERSION").split()
    assert libc == "glibc"
    major, minor = version.split(".")[:2]
    return f"manylinux_{major}_{minor}_x86_64"


def _policy_libraries():
    """What the wheel's manylinux policy lets it take from the system
    (auditwheel's own list for the platform)."""
    import importlib.resources
    import json
    policies = json.loads((importlib.resources.files("auditwheel.policy")
                           / "manylinux-policy.json").read_text())
    name = _glibc_platform().rsplit("_", 2)[0]  # manylinux_2_36
    (policy,) = [p for p in policies if p["name"] == name]
    return set(policy["lib_whitelist"])


def test_wheel_name_carries_interpreter_and_manylinux_tags():
    name = os.path.basename(_wheel_path())
    nodot = "%d%d" % sys.version_info[:2]
    abi = f"cp{nodot}" + ("t" if FREE_THREADED else "")
    tag = f"cp{nodot}-{abi}-{_glibc_platform()}"
    assert name == f"mt_asyncio-{_version()}-{tag}.whl", name
    wheel = _read(f"{_dist_info()}/WHEEL")
    assert re.findall(r"^Tag: (.+)$", wheel, re.M) == [tag], wheel
    assert "Root-Is-Purelib: false" in wheel


def test_package_files_keep_their_places():
    with zipfile.ZipFile(_wheel_path()) as whl:
        names = set(whl.namelist())
    # The type stub and its marker (PEP 561), and the private subpackage.
    for needed in ("mt_asyncio/_core.pyi", "mt_asyncio/py.typed",
                   "mt_asyncio/_loop/__init__.py", "mt_asyncio/_loop/connections.py",
                   "mt_asyncio/asyncio.py"):
        assert needed in names, needed


def test_metadata_describes_the_project():
    meta = _read(f"{_dist_info()}/METADATA")
    headers, _, description = meta.partition("\n\n")
    fields = {}
    for line in headers.splitlines():
        key, _, value = line.partition(": ")
        fields.setdefault(key, []).append(value)
    assert fields["Name"] == ["mt_asyncio"]
    assert fields["Version"] == [_version()]
    assert fields["Requires-Python"] == [">=3.13"]
    assert fields["License-Expression"] == ["Apache-2.0"]
    assert fields["Summary"][0].startswith("A parallel asyncio runtime")
    assert any(c.startswith("Programming Language :: Python :: Free Threading ::")
               for c in fields["Classifier"]), fields["Classifier"]
    assert "Framework :: AsyncIO" in fields["Classifier"]
    assert {u.split(",")[0] for u in fields["Project-URL"]} >= {"Homepage", "Documentation"}
    assert fields["Description-Content-Type"] == ["text/markdown"]
    with open(README, encoding="utf-8") as f:
        assert description == f.read()
    entry_points = _read(f"{_dist_info()}/entry_points.txt")
    assert "[console_scripts]\nmtctl = mt_asyncio._mtctl:main\n" == entry_points


def test_every_library_it_links_travels_with_it():
    # Stripped, it is about 8.3 MB; debug information would double it.
    assert os.path.getsize(_wheel_path()) < 12 * 2**20
    with zipfile.ZipFile(_wheel_path()) as whl:
        names = whl.namelist()
    bundled = [n for n in names if n.startswith("mt_asyncio.libs/") and not n.endswith("/")]
    # Each copy is renamed with a hash of its contents (name-<8 hex>.so...).
    assert bundled and all(re.search(r"-[0-9a-f]{8}\.so", n) for n in bundled), bundled
    assert any(os.path.basename(n).startswith("libgrpc-") for n in bundled), bundled
    out = subprocess.run([sys.executable, "-m", "auditwheel", "show", _wheel_path()],
                         check=True, capture_output=True, text=True).stdout
    flat = " ".join(out.split())
    # The policy auditwheel finds is at most the one the name claims.
    found = re.search(r'consistent with the following platform tag: "manylinux_(\d+)_(\d+)_x86_64"',
                      flat)
    assert found, out
    claimed = tuple(int(n) for n in _glibc_platform().split("_")[1:3])
    assert tuple(int(n) for n in found.groups()) <= claimed, out
    # Versioned symbols come only from the policy's system libraries and
    # from the wheel's own renamed copies.
    referenced = set(re.findall(r"(\S+\.so[.\d]*) with versions", flat))
    assert "libc.so.6" in referenced, out
    foreign = {lib for lib in referenced
               if lib not in _policy_libraries() and not re.search(r"-[0-9a-f]{8}\.so", lib)}
    assert not foreign, out
    assert "external shared libraries are required" not in flat, out


def _marked_steps(path):
    """The blocks of `path` marked <!-- install-test: ... -->, in order:
    ("shell", text) or ("file NAME", text)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    steps = re.findall(r"<!-- install-test: (shell|file [\w.]+) -->\n```\w+\n(.*?)```",
                       text, re.S)
    assert steps, f"no <!-- install-test --> blocks in {path}"
    return steps


def _install_steps():
    """The install page's marked commands (the venv, the wheel, a live
    service asked by mtctl), then the README's first program."""
    return _marked_steps(INSTALL_PAGE) + _marked_steps(README)


def _namespace_prefix():
    """How to run a command in a private mount namespace, or None."""
    if shutil.which("unshare") is None:
        return None
    for prefix in (["unshare", "-m", "--propagation", "private"],
                   ["unshare", "-r", "-m", "--propagation", "private"]):
        probe = subprocess.run(prefix + ["mount", "--bind", "/dev/null", "/dev/null"],
                               capture_output=True)
        if probe.returncode == 0:
            return prefix
    return None


_HIDE = r"""
hidden=0
grpc=""
for pattern in {patterns}; do
  for lib in /usr/lib/x86_64-linux-gnu/$pattern; do
    if [ -f "$lib" ] && [ ! -L "$lib" ]; then
      mount --bind /dev/null "$lib"
      hidden=$((hidden + 1))
      case "$lib" in */libgrpc.so.*) grpc="$lib" ;; esac
    fi
  done
done
echo "hidden: $hidden libraries"
# The namespace really hides them: the dynamic linker cannot load gRPC.
[ -n "$grpc" ] || {{ echo "no libgrpc.so.* to hide" >&2; exit 1; }}
if {python} -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$grpc" 2>/dev/null; then
  echo "$grpc is still visible" >&2
  exit 1
fi
"""

# Run by the venv's interpreter after the install steps: importing the
# extensions maps the wheel's own copies of gRPC and OpenSSL, beside the
# system OpenSSL the interpreter's ssl module loaded, and both work (the
# renamed copies cannot clash).
_MAPS_CHECK = r"""
import hashlib, ssl, sys
import mt_asyncio.asyncio, mt_asyncio.control
from mt_asyncio import _core, _control
server = mt_asyncio.control.serve()
ssl.create_default_context()
assert hashlib.sha256(b"mt").hexdigest().startswith("fe7f7ccc")
with open("/proc/self/maps") as f:
    mapped = {line.split()[-1] for line in f if ".so" in line.split()[-1]}
ours = [p for p in mapped if p.startswith(sys.prefix + "/")]
assert any("/mt_asyncio.libs/libgrpc-" in p for p in ours), sorted(mapped)
assert any("/mt_asyncio.libs/libssl-" in p for p in ours), sorted(mapped)
assert any(p.endswith("/libssl.so.3") for p in mapped if p not in ours), sorted(mapped)
# The native TLS engine and its BoringSSL come from the wheel too (those
# of the system are hidden), loaded beside both OpenSSL copies.
from mt_asyncio import tls
assert tls.engine_version() == "BoringSSL", tls.engine_version()
with open("/proc/self/maps") as f:
    mapped = {line.split()[-1] for line in f if ".so" in line.split()[-1]}
ours = [p for p in mapped if p.startswith(sys.prefix + "/")]
assert any(p.endswith("/mt_asyncio/libmt_tls_engine.so") for p in ours), sorted(mapped)
assert any("/mt_asyncio.libs/libssl-" in p and p.endswith(".so.0") for p in ours), sorted(mapped)
assert any("/mt_asyncio.libs/libcrypto-" in p and p.endswith(".so.0") for p in ours), sorted(mapped)
print("maps ok:", len(ours), "libraries from the wheel")
"""
# How the dynamic linker resolves every ELF file the wheel installed.
_LDD = r"""
for elf in $(find venv/lib/python*/site-packages/mt_asyncio venv/lib/python*/site-packages/mt_asyncio.libs \
             -type f \( -name '*.so*' -o -name mtctl \)); do
  echo "LDD $elf"
  ldd "$elf"
done
"""


def _check_resolution(out, venv_root):
    """Every library an installed ELF file needs resolves inside the venv
    or is one the manylinux policy allows from the system."""
    allowed = _policy_libraries()
    checked = 0
    elf = None
    for line in out.splitlines():
        if line.startswith("LDD "):
            elf = line[4:]
            checked += 1
            continue
        if elf is None or "=>" not in line:
            continue
        name, _, target = line.strip().partition(" => ")
        assert "not found" not in target, (elf, line)
        path = target.split(" (")[0]
        inside = os.path.realpath(path).startswith(os.path.realpath(venv_root) + "/")
        assert inside or name in allowed, (elf, line)
    assert checked >= 4, out  # _core, _control, mtctl and the bundled libraries


def _namespace_script(steps, python):
    lines = ["set -euo pipefail",
             _HIDE.format(patterns=" ".join(HIDDEN_PATTERNS), python=python)]
    for kind, body in steps:
        if kind == "shell":
            lines.append(body)
        else:
            name = kind.split(" ", 1)[1]
            lines.append(f"cat > {name} <<'MT_ASYNCIO_README_EOF'\n{body}MT_ASYNCIO_README_EOF")
    lines.append(f"venv/bin/python -c '{_MAPS_CHECK}'")
    lines.append(_LDD)
    return "\n".join(lines) + "\n"


def _run_in_namespace(tmp_path, steps, interpreter_name):
    prefix = _namespace_prefix()
    if prefix is None:
        pytest.skip("no private mount namespace here (unshare -m needs root or "
                    "unprivileged user namespaces)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python_link = bin_dir / interpreter_name
    python_link.symlink_to(sys.executable)
    dist = tmp_path / "dist"
    dist.mkdir()
    shutil.copy(_wheel_path(), dist)
    script = tmp_path / "install.sh"
    script.write_text(_namespace_script(steps, interpreter_name))
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_CACHE_DIR": "1",
    }
    done = subprocess.run(prefix + ["bash", str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.skipif(not FREE_THREADED, reason=(
    "free-threaded only: the install page's commands name python3.14t and its wheel "
    "(the next test installs this interpreter's wheel the same way)"))
def test_install_page_and_first_program_word_for_word_without_system_libraries(tmp_path):
    if sys.version_info[:2] != (3, 14):
        pytest.skip("the install page's commands name python3.14t")
    out = _run_in_namespace(tmp_path, _install_steps(), "python3.14t")
    assert re.search(r"^hidden: ([1-9]\d*) libraries$", out, re.M), out
    assert "GIL enabled: False" in out
    threads = int(re.search(r"^32 tasks ran on (\d+) worker threads$", out, re.M).group(1))
    assert threads >= 2, out
    steps = [int(n) for n in re.findall(r"^worker \d+: (\d+) steps run$", out, re.M)]
    assert len(steps) == 4 and sum(steps) > 0, out
    # mtctl info and workers answered from the busy service: four workers,
    # the GIL off, and at least two of them running a task at that moment.
    assert re.search(r"^interpreter .*free-threaded, GIL disabled", out, re.M), out
    assert re.search(r"^runtime\s+running,", out, re.M), out
    assert re.search(r"^workers\s+4 target, 4 live", out, re.M), out
    rows = re.findall(r"^\s+\d+\s+\d+\s+(\w+)\s+\d+\s", out, re.M)
    assert len(rows) == 4 and rows.count("running") >= 2, out
    assert "maps ok:" in out
    _check_resolution(out, tmp_path / "venv")


# The two opening examples of mt-asyncio 0.3.0a1's README, from the
# installed wheel: a queue-fed worker pool in a TaskGroup, and a thousand coroutines that each
# sleep 0.1 s, gathered with the default thread count (concurrently: well
# under the 100 s they would take one after another).
_README_0_3_0A1_EXAMPLES = textwrap.dedent("""\
    import sys
    import time
    import mt_asyncio
    import mt_asyncio.asyncio as asyncio

    assert mt_asyncio.__file__.startswith(sys.prefix + "/"), mt_asyncio.__file__

    processed = []

    async def handle(item):
        await asyncio.sleep(0)
        processed.append(item)

    async def produce():
        for i in range(200):
            yield i

    async def worker(queue):
        while (item := await queue.get()) is not None:
            await handle(item)

    async def pool():
        queue = asyncio.Queue(maxsize=16)
        async with asyncio.TaskGroup() as tg:
            for _ in range(8):
                tg.create_task(worker(queue))
            async for item in produce():
                await queue.put(item)
            for _ in range(8):
                await queue.put(None)

    asyncio.run(pool(), threads=4)
    assert sorted(processed) == list(range(200)), processed

    async def doubled_later(n):
        await asyncio.sleep(0.1)
        return 2 * n

    async def sleepers():
        return await asyncio.gather(*[doubled_later(k) for k in range(1000)])

    start = time.monotonic()
    results = asyncio.run(sleepers())
    took = time.monotonic() - start
    assert results == [2 * k for k in range(1000)], results[:10]
    assert took < 5, took
    print("examples ok, GIL enabled:", sys._is_gil_enabled())
    """)


def test_installs_and_runs_without_system_libraries(tmp_path):
    """The same isolation for whichever interpreter built the wheel (a GIL
    build included): install, import both extensions, the examples of
    mt-asyncio 0.3.0a1's README, mtctl."""
    steps = [
        ("shell", f"{os.path.basename(sys.executable)} -m venv venv\n"
                  "venv/bin/pip install --no-index dist/mt_asyncio-*.whl\n"),
        ("file examples.py", _README_0_3_0A1_EXAMPLES),
        ("shell", "venv/bin/python examples.py\nvenv/bin/mtctl --help | head -1\n"),
    ]
    out = _run_in_namespace(tmp_path, steps, os.path.basename(sys.executable))
    assert re.search(r"^hidden: ([1-9]\d*) libraries$", out, re.M), out
    assert f"examples ok, GIL enabled: {not FREE_THREADED}" in out, out
    assert "usage: mtctl" in out
    assert "maps ok:" in out
    _check_resolution(out, tmp_path / "venv")
