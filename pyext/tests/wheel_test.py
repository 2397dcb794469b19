"""The wheel installs with pip --no-index into a fresh venv and imports."""

import os
import subprocess
import sys
import sysconfig
import venv

import pytest

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def _wheel_path():
    here = os.path.dirname(os.path.abspath(__file__))
    folder = os.path.dirname(here)
    wheels = [f for f in os.listdir(folder) if f.endswith(".whl")]
    assert len(wheels) == 1, wheels
    return os.path.join(folder, wheels[0])


def test_wheel_has_the_interpreter_tags():
    name = os.path.basename(_wheel_path())
    nodot = "%d%d" % sys.version_info[:2]
    abi = f"cp{nodot}" + ("t" if FREE_THREADED else "")
    assert name.startswith(f"mt_asyncio-0.1.0-cp{nodot}-{abi}-linux_"), name


def test_wheel_installs_into_a_fresh_venv(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "--no-index", "-q",
                    "--disable-pip-version-check", _wheel_path()], check=True)
    check = ("import sys, mt_asyncio.asyncio, mt_asyncio.control\n"
             "assert mt_asyncio.__file__.startswith(sys.prefix), mt_asyncio.__file__\n"
             "from mt_asyncio import _control\n")
    if FREE_THREADED:
        check += "assert not sys._is_gil_enabled()\n"
    # Run outside the test's folder so nothing but the venv can be imported.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([py, "-c", check], check=True, cwd=tmp_path, env=env)
    # A queue-fed worker pool in a TaskGroup, the shape of the seed README's
    # first example, runs from the installed wheel.
    program = """
import mt_asyncio.asyncio as asyncio

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

async def main():
    queue = asyncio.Queue(maxsize=16)
    async with asyncio.TaskGroup() as tg:
        for _ in range(8):
            tg.create_task(worker(queue))
        async for item in produce():
            await queue.put(item)
        for _ in range(8):
            await queue.put(None)

asyncio.run(main())
assert sorted(processed) == list(range(200)), processed
print("example ok")
"""
    out = subprocess.run([py, "-c", program], check=True, cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert "example ok" in out.stdout
    # The seed README's opening example has this shape too: a thousand
    # coroutines that each sleep 0.1 s, gathered with asyncio.run and the
    # default thread count. They sleep concurrently: well under a second.
    sleepers = """
import time
import mt_asyncio.asyncio as asyncio

async def doubled_later(n):
    await asyncio.sleep(0.1)
    return 2 * n

async def main():
    return await asyncio.gather(*[doubled_later(k) for k in range(1000)])

start = time.monotonic()
results = asyncio.run(main())
took = time.monotonic() - start
assert results == [2 * k for k in range(1000)], results[:10]
assert took < 5, took
print("sleepers ok")
"""
    out = subprocess.run([py, "-c", sleepers], check=True, cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert "sleepers ok" in out.stdout
    mtctl = env_dir / "bin" / "mtctl"
    assert os.access(mtctl, os.X_OK)
    out = subprocess.run([str(mtctl), "--help"], check=True, capture_output=True, text=True)
    assert "usage: mtctl" in out.stdout

