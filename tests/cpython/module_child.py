"""Runs one module of CPython's test_asyncio in this process, on stdlib's
loop or on mt_asyncio's, and writes one JSON line per finished test.

Invoked by runner.py, one process per (module, backend, workers) — and
again after a test hangs, with every test already reported excluded, so
one hang costs one test, not the module. A test that runs longer than
--test-timeout is reported as "hang" with every thread's stack on stderr,
and the process ends. A child process a test leaves behind (running or
not reaped) fails that test, on either backend, and is killed.

On mt_asyncio (--backend mt) the runtime starts with --workers worker
threads and compat.install() makes mt_asyncio the default loop. Test
classes that build a selector loop themselves (create_event_loop /
new_loop returning asyncio.SelectorEventLoop(...)) get ours instead, the
way uvloop's test base gives its tests uvloop's loop. Each result carries
how many of our loops (and of stdlib's) the test made, so a count can say
how many tests really ran on the loop under test.
"""

import argparse
import faulthandler
import importlib
import inspect
import json
import os
import signal
import sys
import threading
import time
import unittest

# Selector variants that run the same tests on stdlib's other selectors:
# they test stdlib's selectors module, not the loop, and on our loop they
# would only repeat the EPoll class. Dropped on both backends.
_SELECTOR_VARIANTS = ("PollEventLoopTests", "SelectEventLoopTests",
                      "KqueueEventLoopTests")
_LOOP_BUILDERS = ("create_event_loop", "new_loop")

# Classes that repeat a C-implementation class with stdlib's pure-Python
# Task/Future (_PyTask, _PyFuture, _py_current_task, ...). They test
# stdlib's Python implementation, not the loop; dropped on both backends.
_PY_VARIANTS = {
    "test_graph": ("TestCallStackPy",),
    "test_futures2": ("PyFutureTests",),
    "test_free_threading": ("TestPyFreeThreading", "TestEagerPyFreeThreading"),
    "test_eager_task_factory": ("PyEagerTaskFactoryLoopTests",
                                "NonEagerPyTaskTests", "EagerPyTaskTests"),
}
# What the C-implementation classes swap in (asyncio.Task = tasks._CTask,
# ...): on mt_asyncio these names are ours, so those classes test our
# Task, Future and task registry — the implementation the loop runs —
# as uvloop's tests run on uvloop's.
_C_IMPLEMENTATION = (
    ("asyncio.tasks", "_CTask", "Task"),
    ("asyncio.futures", "_CFuture", "Future"),
    ("asyncio.tasks", "_c_current_task", "current_task"),
    ("asyncio.tasks", "_c_all_tasks", "all_tasks"),
    ("asyncio.futures", "_c_future_add_to_awaited_by", "future_add_to_awaited_by"),
    ("asyncio.futures", "_c_future_discard_from_awaited_by",
     "future_discard_from_awaited_by"),
)
# Test classes that build a mocked stdlib BaseEventLoop in setUp although
# nothing in them needs one: on mt_asyncio they get ours.
_MOCK_LOOP_CLASSES = {"test_pep492": ("BaseTest",)}


class _Counters:
    def __init__(self):
        self.ours = 0
        self.stdlib = 0


COUNTERS = _Counters()


def _count_stdlib_loops():
    import asyncio.base_events as base_events
    original = base_events.BaseEventLoop.__init__

    def counting_init(self, *args, **kwargs):
        COUNTERS.stdlib += 1
        original(self, *args, **kwargs)

    base_events.BaseEventLoop.__init__ = counting_init


def _install_mt(workers):
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
    return mt_asyncio


def _swap_in_our_implementation(module):
    """Points stdlib's C-implementation names at ours, and class attributes
    that captured them at import (Task = tasks._CTask)."""
    import mt_asyncio.asyncio as mt
    swapped = {}
    for module_name, attr, ours in _C_IMPLEMENTATION:
        target = importlib.import_module(module_name)
        original = getattr(target, attr, None)
        if original is None:
            continue
        swapped[original] = getattr(mt, ours)
        setattr(target, attr, getattr(mt, ours))
    for name, cls in vars(module).items():
        if not isinstance(cls, type):
            continue
        for attr in ("Task", "cls"):
            value = cls.__dict__.get(attr)
            if value is not None and value in swapped:
                setattr(cls, attr, swapped[value])


def _give_mock_loop_classes_ours(module):
    def our_set_up(cls):
        def set_up(self):
            super(cls, self).setUp()
            import asyncio
            self.loop = asyncio.new_event_loop()
            self.set_event_loop(self.loop)
        return set_up

    for name in _MOCK_LOOP_CLASSES.get(module.__name__.rsplit(".", 1)[-1], ()):
        cls = getattr(module, name)
        cls.setUp = our_set_up(cls)


def _our_loop(self):
    import asyncio
    return asyncio.new_event_loop()  # compat.install() made it ours.


def _give_classes_our_loop(module):
    """Test classes that build a stdlib selector loop get ours."""
    replaced = []
    for name, cls in vars(module).items():
        if not (isinstance(cls, type) and issubclass(cls, unittest.TestCase)):
            continue
        for builder in _LOOP_BUILDERS:
            method = cls.__dict__.get(builder)
            if method is None:
                continue
            try:
                source = inspect.getsource(method)
            except (OSError, TypeError):
                continue
            if "SelectorEventLoop" in source:
                setattr(cls, builder, _our_loop)
                replaced.append(f"{name}.{builder}")
    return replaced


def _iter_tests(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _iter_tests(item)
        else:
            yield item


class _Watchdog:
    """Ends the process when one test runs longer than `timeout` seconds,
    after reporting it as hung and dumping every thread's stack."""

    def __init__(self, timeout, report):
        self._timeout = timeout
        self._report = report
        self._lock = threading.Lock()
        self._current = None
        self._started = 0.0
        thread = threading.Thread(target=self._watch, daemon=True,
                                  name="test-watchdog")
        thread.start()

    def begin(self, test_id):
        with self._lock:
            self._current, self._started = test_id, time.monotonic()

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
            sys.stderr.write(f"\n=== HANG {current} after {self._timeout:.0f} s;"
                             " stacks:\n")
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            sys.stderr.flush()
            left = _children_left(grace=0)
            self._report(current, "hang",
                         f"no result after {self._timeout:.0f} s"
                         + (f"; killed its children: {'; '.join(left)}" if left else ""))
            os._exit(3)


class _Result(unittest.TestResult):
    """Records one outcome per test: pass, fail, error, skip, xfail,
    xpass."""

    def __init__(self):
        super().__init__()
        self.outcome = None
        self.detail = ""

    def _set(self, outcome, detail=""):
        # A test can fail in tearDown after passing: the worst one stands.
        rank = {"pass": 0, "skip": 1, "xfail": 1, "xpass": 2, "fail": 3,
                "error": 4}
        if self.outcome is None or rank[outcome] > rank[self.outcome]:
            self.outcome, self.detail = outcome, detail

    def addSuccess(self, test):
        self._set("pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._set("fail", self.failures[-1][1])

    def addError(self, test, err):
        super().addError(test, err)
        self._set("error", self.errors[-1][1])

    def addSkip(self, test, reason):
        self._set("skip", reason)

    def addExpectedFailure(self, test, err):
        self._set("xfail")

    def addUnexpectedSuccess(self, test):
        self._set("xpass")

    def addSubTest(self, test, subtest, err):
        if err is not None:
            kind = "fail" if issubclass(err[0], test.failureException) else "error"
            self._set(kind, self._exc_info_to_string(err, test))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--module", required=True)
    parser.add_argument("--backend", choices=("std", "mt"), required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--results", required=True)
    parser.add_argument("--exclude", default=None,
                        help="file of test ids not to run again")
    parser.add_argument("--test-timeout", type=float, default=60.0)
    args = parser.parse_args()

    # A process started in the background by a shell inherits SIGINT
    # ignored, and Python then installs no KeyboardInterrupt handler:
    # tests that interrupt themselves (_thread.interrupt_main) would wait
    # forever. Give it back, as an interactive run has it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _count_stdlib_loops()
    if args.backend == "mt":
        _install_mt(args.workers)

    out = open(args.results, "a", encoding="utf-8")
    write_lock = threading.Lock()

    def report(test_id, outcome, detail="", ours=0, stdlib=0, seconds=0.0):
        line = json.dumps({"id": test_id, "outcome": outcome,
                           "detail": detail[-4000:], "ours": ours,
                           "stdlib": stdlib, "seconds": round(seconds, 3)})
        with write_lock:
            out.write(line + "\n")
            out.flush()

    module = importlib.import_module(f"test.test_asyncio.{args.module}")
    for name in _SELECTOR_VARIANTS:
        if hasattr(module, "EPollEventLoopTests") and hasattr(module, name):
            delattr(module, name)
    for name in _PY_VARIANTS.get(args.module, ()):
        if hasattr(module, name):
            delattr(module, name)
    if args.backend == "mt":
        _swap_in_our_implementation(module)
        _give_mock_loop_classes_ours(module)
        replaced = _give_classes_our_loop(module)
        if replaced:
            print("our loop given to: " + ", ".join(sorted(replaced)),
                  file=sys.stderr)

    excluded = set()
    if args.exclude and os.path.exists(args.exclude):
        with open(args.exclude, encoding="utf-8") as f:
            excluded = {line.strip() for line in f if line.strip()}

    suite = unittest.defaultTestLoader.loadTestsFromModule(module)
    tests = [t for t in _iter_tests(suite) if t.id() not in excluded]
    # Module-level and class-level fixtures run through a suite: build one
    # per test class, in order, and run each test alone inside it.
    with write_lock:
        out.write(json.dumps({"collected": [t.id() for t in tests]}) + "\n")
        out.flush()
    watchdog = _Watchdog(args.test_timeout, report)
    runner_suite = unittest.TestSuite(tests)
    result = unittest.TestResult()
    # unittest.TestSuite drives setUpClass/setUpModule; we hook per-test
    # accounting by wrapping each test's run.
    for test in tests:
        _wrap(test, watchdog, report)
    runner_suite.run(result)
    # Errors in class/module fixtures are reported as _ErrorHolder items.
    for holder, tb in result.errors:
        if not hasattr(holder, "_testMethodName"):
            report(holder.id(), "error", tb)
    out.close()
    sys.stdout.flush()
    sys.stderr.flush()
    # Worker threads of a runtime that a test left in a strange state must
    # not hold the process open: every result is already written.
    os._exit(0)


def _child_pids():
    pids = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except FileNotFoundError:
            pass  # A thread that ended while we listed them.
    return pids


def _children_left(grace=3.0):
    """Children of this process still there `grace` seconds after a test
    (a loop may still be reaping one): described, then killed and reaped."""
    if not os.path.exists("/proc/self/task"):
        return []  # Not Linux: not checked.
    deadline = time.monotonic() + grace
    while (pids := _child_pids()) and time.monotonic() < deadline:
        time.sleep(0.02)
    described = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        described.append(f"pid {pid} state {state} {cmdline or '(zombie)'}")
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    return described


def _wrap(test, watchdog, report):
    original_run = test.run

    def run(result=None):
        own = _Result()
        before_ours, before_std = COUNTERS.ours, COUNTERS.stdlib
        watchdog.begin(test.id())
        started = time.monotonic()
        try:
            original_run(own)
        finally:
            watchdog.end()
        seconds = time.monotonic() - started
        left = _children_left()
        if left:
            # A child still running (or never reaped) after the test is
            # the test's failure here, on either backend; it is killed so
            # it cannot outlive this process holding the runner's files.
            own._set("fail", "child process(es) left after the test: "
                     + "; ".join(left))
        report(test.id(), own.outcome or "pass", own.detail,
               COUNTERS.ours - before_ours, COUNTERS.stdlib - before_std,
               seconds)
        if result is not None:
            result.testsRun += 1

    # TestCase.__call__ looks run up on the instance.
    test.run = run


if __name__ == "__main__":
    main()
