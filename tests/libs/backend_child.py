"""Runs one scenario module's scenarios on one backend, in a process of its
own, and writes what each observed as JSON.

    backend_child.py MODULE BACKEND OUT_JSON

BACKEND is 'stdlib' (asyncio's own loop), 'mt@N' (compat.install() and
the parallel loop with N workers) or 'mt@N/parallel' (the same with
install(serial_tasks=False): the program's own tasks step in parallel
too). A process of its own, because libraries bind asyncio's names when
they are imported: the backend has to be chosen first.

The module registers async scenarios with @scenario; each returns a
JSON-able observation. After each one this process must have no more
descriptors open than before it, and no child process (running or a
zombie): either is recorded as the scenario's failure (and such a child
is killed). Results are written after every scenario, so a hang still
leaves what ran."""

import gc
import importlib
import json
import os
import signal
import sys
import time
import traceback

SCENARIO_TIMEOUT_S = 90
SETTLE_S = 5


def _setup_backend(backend):
    if backend == "stdlib":
        import asyncio
        return lambda main: asyncio.run(main())
    spec, _, mode = backend.partition("/")
    threads = int(spec.removeprefix("mt@"))
    import mt_asyncio.compat
    mt_asyncio.compat.install(serial_tasks=(mode != "parallel"))
    import asyncio
    return lambda main: asyncio.run(main(), threads=threads)


def _children():
    found = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                found += f.read().split()
        except FileNotFoundError:
            pass  # A thread that ended while we listed them.
    return found


def _kill(pids):
    for pid in map(int, pids):
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


def _settle(limit):
    """Waits (bounded) until at most `limit` descriptors are open and no
    child is left; returns (fds, children)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        gc.collect()
        fds, children = _open_fds(), _children()
        if (fds <= limit and not children) or time.monotonic() > deadline:
            return fds, children
        time.sleep(0.02)


def _as_json(value):
    """Values JSON has no type for (bytes, ...) are compared by repr."""
    return f"{type(value).__name__}:{value!r}"


def main(module_name, backend, out_path):
    run = _setup_backend(backend)
    import asyncio  # The backend's names, after install().

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    module = importlib.import_module(module_name)
    results = {}

    async def nothing():
        await asyncio.sleep(0)

    run(nothing)  # The parallel runtime's own descriptors, made once.
    baseline = _settle(_open_fds())[0]
    for name, fn in module.SCENARIOS.items():
        print(f"[{backend}] {name}", file=sys.stderr, flush=True)
        errors = []
        started = time.monotonic()

        async def bounded():
            asyncio.get_running_loop().set_exception_handler(
                lambda loop, ctx: errors.append(
                    f"{ctx.get('message')}: {ctx.get('exception')!r}"))
            return await asyncio.wait_for(fn(), SCENARIO_TIMEOUT_S)

        try:
            record = {"observed": run(bounded)}
        except BaseException:  # noqa: BLE001 - reported, not raised.
            record = {"error": traceback.format_exc()}
        record["seconds"] = round(time.monotonic() - started, 3)
        if errors:
            record["loop_errors"] = errors
        fds, children = _settle(baseline)
        if fds > baseline:
            record["leak"] = f"{fds - baseline} descriptor(s) left open"
        if children:
            record["children_left"] = children
            _kill(children)  # Not to be blamed on the next scenario.
        baseline = min(baseline, fds)
        results[name] = record
        with open(out_path + ".tmp", "w") as f:
            json.dump(results, f, indent=1, sort_keys=True, default=_as_json)
        os.replace(out_path + ".tmp", out_path)


if __name__ == "__main__":
    main(*sys.argv[1:4])
