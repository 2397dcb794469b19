#!/usr/bin/env bash
# Builds //pyext:sdist and installs it with `pip install` into a fresh venv
# of the chosen interpreter (pip runs tools/pep517_backend.py, which builds
# the wheel with Bazel), then checks what got installed: the manylinux
# wheel's tag, both extensions, a TaskGroup and mtctl. Run by .ci/run; the
# first run compiles everything (about 3 minutes on 2 cores), later runs
# reuse the backend's disk cache (about 1 minute).
set -euo pipefail
cd "$(dirname "$0")/.."

read -r python _ <<<"$(tools/find_python.sh)"
bazel build //pyext:sdist
sdist="$(bazel info bazel-bin)/pyext/mt_asyncio-$(sed -n 's/^MT_ASYNCIO_VERSION = "\(.*\)"/\1/p' version.bzl).tar.gz"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install -q --no-cache-dir --disable-pip-version-check "$sdist"
cd "$work"  # nothing but the venv to import from
venv/bin/python - <<'PY'
import glob, os, sys, sysconfig
import mt_asyncio.asyncio as asyncio
import mt_asyncio.control
from mt_asyncio import _control

(wheel,) = glob.glob(os.path.join(sysconfig.get_path("platlib"), "mt_asyncio-*.dist-info", "WHEEL"))
tags = [line.split(": ", 1)[1] for line in open(wheel).read().splitlines() if line.startswith("Tag: ")]
assert len(tags) == 1 and "-manylinux_" in tags[0], tags
assert mt_asyncio.__file__.startswith(sys.prefix), mt_asyncio.__file__

async def main():
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(asyncio.sleep(0, result=n)) for n in range(100)]
    return [t.result() for t in tasks]

assert asyncio.run(main(), threads=2) == list(range(100))
print("sdist install ok:", tags[0])
PY
venv/bin/mtctl --help | head -1
