"""A pytest plugin that runs another project's own tests on one backend
and writes one JSON line per finished test (runner.py reads them).

Imported by child_main.py before pytest loads anything else, so that on
mt_asyncio (MT_UPSTREAM_BACKEND=mt) the runtime is started with
MT_UPSTREAM_WORKERS workers and compat.install() has made our loop what
``asyncio.new_event_loop()`` / ``asyncio.run()`` / ``asyncio.Runner`` give
before any test module imports asyncio's names.

Each result carries how many of our loops (and of stdlib's) the test
built and how many units our runtime's workers ran meanwhile, so the
runner can say how many tests really ran on the loop under test.

A test that runs longer than MT_UPSTREAM_TIMEOUT seconds is reported as
"hang", every thread's stack goes to stderr, and the process ends; the
runner starts a new one without the tests already reported.
"""

import faulthandler
import json
import os
import signal
import sys
import threading
import time

import pytest

BACKEND = os.environ.get("MT_UPSTREAM_BACKEND", "std")
WORKERS = int(os.environ.get("MT_UPSTREAM_WORKERS", "1"))
TIMEOUT = float(os.environ.get("MT_UPSTREAM_TIMEOUT", "60"))
RESULTS = os.environ.get("MT_UPSTREAM_RESULTS")
EXCLUDE = os.environ.get("MT_UPSTREAM_EXCLUDE")
ONLY = os.environ.get("MT_UPSTREAM_ONLY")

# Parameters that run the test on another event loop library or async
# framework: they test that library, not the loop, and are deselected on
# every backend (anyio's trio backend, its uvloop/winloop variants).
_OTHER_LOOP_IDS = ("trio", "uvloop", "winloop")


class _Counters:
    def __init__(self):
        self.ours = 0
        self.stdlib = 0


COUNTERS = _Counters()
_runtime_units = None  # () -> units run by our workers so far


def _count_stdlib_loops():
    import asyncio.base_events as base_events
    original = base_events.BaseEventLoop.__init__

    def counting_init(self, *args, **kwargs):
        COUNTERS.stdlib += 1
        original(self, *args, **kwargs)

    base_events.BaseEventLoop.__init__ = counting_init


def _install_mt(workers):
    global _runtime_units
    import mt_asyncio
    import mt_asyncio.compat
    from mt_asyncio import base_events

    mt_asyncio.start_runtime(workers)
    mt_asyncio.compat.install()
    original = base_events.EventLoop.__init__

    def counting_init(self, *args, **kwargs):
        COUNTERS.ours += 1
        original(self, *args, **kwargs)

    base_events.EventLoop.__init__ = counting_init

    def units():
        return sum(w["units_run"] for w in mt_asyncio.runtime_info()["workers"])

    _runtime_units = units


# blockbuster (anyio's and aiohttp's fixture that fails a blocking call made
# in async code) lets stdlib's loop make the calls a loop must make by
# naming its functions: os.sendfile in base_events.sendfile, the
# exec-error pipe's os.read in subprocess_exec/subprocess_shell, os.stat in
# unix_events.create_unix_server and os.stat/os.unlink in its
# _stop_serving. Our functions that make the same calls are named beside
# them (the socket file's checks are in create_unix_server and in the
# server's _close_socket); nothing else is allowed.
_OUR_LOOP_MAY_BLOCK = {
    "os.sendfile": [("mt_asyncio/_loop/sendfile.py", {"sendfile"})],
    "os.read": [("mt_asyncio/_loop/processes.py", {"subprocess_exec", "subprocess_shell"})],
    "os.stat": [("mt_asyncio/_loop/connections.py", {"create_unix_server"}),
                ("mt_asyncio/_loop/servers.py", {"_close_socket"})],
    "os.unlink": [("mt_asyncio/_loop/servers.py", {"_close_socket"})],
}


def _allow_our_loop_in_blockbuster():
    try:
        import blockbuster.blockbuster as bb
    except ImportError:
        return
    # The places are file paths: one that no longer exists (a module moved)
    # would allow nothing, and the calls would fail the suites as blocking.
    import mt_asyncio
    root = os.path.dirname(os.path.dirname(os.path.abspath(mt_asyncio.__file__)))
    for places in _OUR_LOOP_MAY_BLOCK.values():
        for filename, _ in places:
            if not os.path.isfile(os.path.join(root, filename)):
                raise RuntimeError(f"blockbuster allowance names a missing file: {filename}")
    original = bb.BlockBuster.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        for name, places in _OUR_LOOP_MAY_BLOCK.items():
            for filename, functions in places:
                if name in self.functions:
                    self.functions[name].can_block_in(filename, functions)

    bb.BlockBuster.__init__ = init


# A process started in the background inherits SIGINT ignored, and Python
# then installs no KeyboardInterrupt handler; tests that interrupt
# themselves need it, as an interactive run has it.
signal.signal(signal.SIGINT, signal.default_int_handler)
_count_stdlib_loops()
if BACKEND == "mt":
    _install_mt(WORKERS)
    _allow_our_loop_in_blockbuster()

_out = open(RESULTS, "a", encoding="utf-8") if RESULTS else None
# pytest captures file descriptors 1 and 2 around each test: a hang's
# stacks go to a copy of the real stderr, made before it does.
_stderr = os.fdopen(os.dup(2), "w", buffering=1)
_write_lock = threading.Lock()


def _write(record):
    if _out is None:
        return
    with _write_lock:
        _out.write(json.dumps(record) + "\n")
        _out.flush()


def _read_ids(path):
    if not path or not os.path.exists(path):
        return set()
    with open(path, encoding="utf-8") as f:
        return {line.rstrip("\n") for line in f if line.strip()}


class _Watchdog:
    """Ends the process when one test runs longer than `timeout` seconds,
    after reporting it as hung and dumping every thread's stack."""

    def __init__(self, timeout):
        self._timeout = timeout
        self._lock = threading.Lock()
        self._current = None
        self._started = 0.0
        threading.Thread(target=self._watch, daemon=True,
                         name="upstream-watchdog").start()

    def begin(self, nodeid):
        with self._lock:
            self._current, self._started = nodeid, time.monotonic()

    def end(self):
        with self._lock:
            self._current = None

    def _watch(self):
        while True:
            time.sleep(0.5)
            with self._lock:
                current, started = self._current, self._started
            if current is None or time.monotonic() - started < self._timeout:
                continue
            _stderr.write(f"\n=== HANG {current} after {self._timeout:.0f} s;"
                          " every thread's stack:\n")
            _stderr.flush()
            faulthandler.dump_traceback(file=_stderr, all_threads=True)
            _stderr.flush()
            _dump_runtime()
            _write({"id": current, "outcome": "hang",
                    "detail": f"no result after {self._timeout:.0f} s",
                    "ours": 0, "stdlib": 0, "units": 0,
                    "seconds": round(time.monotonic() - started, 3)})
            os._exit(3)


def _dump_runtime():
    """What our runtime was doing when a test hung: its queues, units in
    flight, stand-ins and each worker's state (a hang with every worker
    idle and nothing queued is a lost wakeup)."""
    if BACKEND != "mt":
        return
    try:
        import json
        import mt_asyncio
        info = mt_asyncio.runtime_info()
        workers = [{k: w.get(k) for k in ("index", "state", "units_run", "current_task_id",
                                          "local_queue_depth")}
                   for w in info.get("workers", ())]
        summary = {k: v for k, v in info.items() if not isinstance(v, (dict, list))}
        _stderr.write("=== runtime: " + json.dumps(summary) + "\n")
        _stderr.write("=== workers: " + json.dumps(workers) + "\n")
        _dump_pending_tasks()
    except Exception as exc:  # noqa: BLE001 - a report of a report.
        _stderr.write(f"=== runtime: unavailable ({exc!r})\n")
    _stderr.flush()


def _dump_pending_tasks():
    """Every pending task of our running loops, with what it waits for
    (a done future there is a lost task wakeup; a pending one, a lost
    completion)."""
    import gc
    from mt_asyncio.base_events import EventLoop
    for loop in [o for o in gc.get_objects() if isinstance(o, EventLoop)]:
        if not loop.is_running():
            continue
        for task in list(loop._all_tasks()):
            waiter = getattr(task, "_fut_waiter", None)
            state = None if waiter is None else getattr(waiter, "_state", "?")
            _stderr.write(f"=== task {task!r}\n    waits for {waiter!r} ({state})\n")


_watchdog = None


def _is_other_loop(item):
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return False
    backend = callspec.params.get("anyio_backend")
    name = backend[0] if isinstance(backend, tuple) else backend
    if name is not None and name != "asyncio":
        return True
    ids = callspec.id.split("-")
    return any(part == "asyncio+" + other or part == other
               for part in ids for other in _OTHER_LOOP_IDS)


def pytest_collection_modifyitems(session, config, items):
    excluded = _read_ids(EXCLUDE)
    only = _read_ids(ONLY) if ONLY else None
    keep, drop = [], []
    for item in items:
        if (_is_other_loop(item) or item.nodeid in excluded
                or (only is not None and item.nodeid not in only)):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep
    _write({"collected": [item.nodeid for item in keep]})


class _Record:
    __slots__ = ("outcome", "detail")

    def __init__(self):
        self.outcome = None
        self.detail = ""

    _RANK = {"pass": 0, "skip": 1, "xfail": 1, "fail": 3, "error": 4}

    def set(self, outcome, detail=""):
        if self.outcome is None or self._RANK[outcome] > self._RANK[self.outcome]:
            self.outcome, self.detail = outcome, detail


_current = {}


def pytest_runtest_logreport(report):
    record = _current.get(report.nodeid)
    if record is None:
        return
    if report.passed:
        if report.when == "call":
            record.set("pass")
    elif report.skipped:
        if hasattr(report, "wasxfail"):
            record.set("xfail")
        else:
            record.set("skip", str(report.longrepr)[-500:])
    elif report.failed:
        kind = "fail" if report.when == "call" else "error"
        record.set(kind, f"{report.when}: {report.longreprtext}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _watchdog
    if _watchdog is None:
        _watchdog = _Watchdog(TIMEOUT)
    record = _current[item.nodeid] = _Record()
    before_ours, before_std = COUNTERS.ours, COUNTERS.stdlib
    before_units = _runtime_units() if _runtime_units else 0
    _watchdog.begin(item.nodeid)
    started = time.monotonic()
    try:
        yield
    finally:
        _watchdog.end()
        seconds = time.monotonic() - started
        units = (_runtime_units() - before_units) if _runtime_units else 0
        del _current[item.nodeid]
        _write({"id": item.nodeid, "outcome": record.outcome or "error",
                "detail": record.detail[-4000:] if record.outcome != "pass" else "",
                "ours": COUNTERS.ours - before_ours,
                "stdlib": COUNTERS.stdlib - before_std, "units": units,
                "seconds": round(seconds, 3)})


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    # Every result is written: worker threads a test left in a strange
    # state, or a thread it never joined, must not hold the process open.
    # A module that re-enabled the GIL (an extension not declaring
    # free-threading support) would have made the run serial: say so.
    _write({"gil_enabled": bool(getattr(sys, "_is_gil_enabled", lambda: True)())})
    if _out is not None:
        _out.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
