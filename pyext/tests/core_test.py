"""mt_asyncio._core and the package surface: import, GIL, runtime workers."""

import asyncio as stdlib_asyncio
import os
import sys
import sysconfig
import threading
import time

import pytest

import mt_asyncio
import mt_asyncio.asyncio as mt_aio

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
WAIT = 10  # Seconds; every wait in these tests is bounded.


@pytest.fixture
def runtime():
    mt_asyncio.start_runtime(2)
    try:
        yield
    finally:
        mt_asyncio.shutdown_runtime()


def test_interpreter_is_reported():
    kind = "free-threaded" if FREE_THREADED else "GIL build"
    print(f"interpreter: {sys.executable} (CPython {sys.version.split()[0]}, {kind})")
    # The extension was built against this very interpreter: same version,
    # same kind of build (a mismatch would load, then corrupt objects).
    info = mt_asyncio.build_info()
    assert info["python_headers"] == "%d.%d.%d" % sys.version_info[:3]
    assert info["free_threaded_build"] is FREE_THREADED
    assert sys.version_info >= (3, 13)


@pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded CPython build")
def test_import_keeps_gil_disabled():
    # Imported at the top of this file, with mt_asyncio.asyncio.
    assert not sys._is_gil_enabled()


def test_asyncio_namespace_runs_on_the_parallel_loop():
    assert mt_aio.BACKEND == "mt_asyncio"
    assert set(stdlib_asyncio.__all__) <= set(dir(mt_aio))
    # Exceptions are stdlib's own classes; submodules are stdlib's.
    assert mt_aio.CancelledError is stdlib_asyncio.CancelledError
    assert mt_aio.QueueShutDown is stdlib_asyncio.QueueShutDown
    assert mt_aio.events is stdlib_asyncio.events
    # What must be thread-safe is ours.
    assert mt_aio.Lock is not stdlib_asyncio.Lock
    assert mt_aio.gather is not stdlib_asyncio.gather

    async def main():
        await mt_aio.sleep(0)
        loop = mt_aio.get_running_loop()
        return type(loop).__name__, mt_aio.current_task() is not None

    try:
        assert mt_aio.run(main()) == ("EventLoop", True)
        # The subprocess functions are ours, and so is asyncio.subprocess.
        assert mt_aio.create_subprocess_exec is mt_aio.subprocess.create_subprocess_exec
        assert mt_aio.subprocess is not stdlib_asyncio.subprocess
        assert mt_aio.subprocess.PIPE == stdlib_asyncio.subprocess.PIPE
        with pytest.raises(AttributeError):
            mt_aio.no_such_name
    finally:
        mt_asyncio.shutdown_runtime()  # Other tests start their own.


def test_build_info_describes_the_extension():
    info = mt_asyncio.build_info()
    assert info["free_threaded_build"] == FREE_THREADED
    assert set(info) >= {"optimized", "sanitizer", "python_headers"}
    assert info["python_headers"].startswith("%d.%d" % sys.version_info[:2])


def test_callables_run_on_worker_threads(runtime):
    done = threading.Event()
    lock = threading.Lock()
    seen = []
    n = 200

    def unit():
        with lock:
            seen.append((threading.get_native_id(), mt_asyncio._core.on_worker_thread()))
            if len(seen) == n:
                done.set()

    for _ in range(n):
        mt_asyncio._core.spawn(unit)
    assert done.wait(WAIT)
    assert all(on_worker for _, on_worker in seen)
    assert threading.get_native_id() not in {tid for tid, _ in seen}
    assert not mt_asyncio._core.on_worker_thread()


def test_snapshot_counts_units(runtime):
    n = 100
    for _ in range(n):
        mt_asyncio._core.spawn(lambda: None)
    mt_asyncio.shutdown_runtime()  # Drains what is queued, then joins.
    info = mt_asyncio.runtime_info()
    assert info["state"] == "stopped"
    assert info["config"]["worker_threads"] == 2
    assert info["live_workers"] == 0
    assert sum(w["units_run"] for w in info["workers"]) == n


def test_snapshot_describes_scheduler_reactor_and_blocking_pool(runtime):
    info = mt_asyncio.runtime_info()
    assert info["state"] == "running"
    assert info["config"]["reactor_mode"] == "workers"
    assert set(info["blocking"]) == {
        "threads", "idle", "running", "queued", "max_threads", "idle_ttl_seconds",
        "completed", "cancelled", "abandoned"}
    assert info["blocking"]["max_threads"] == 128
    assert info["config"]["blocking_threads_max"] == 128
    assert info["timers_pending"] == 0
    assert info["fds_registered"] == 0
    assert info["tasks_in_flight"] >= 0
    worker = info["workers"][0]
    for key in ("steals", "stolen_from", "reactor_polls", "local_queue_depth",
                "lifo_occupied", "current_task_id", "current_task_running_ns",
                "stalled", "active", "state", "os_thread_id"):
        assert key in worker
    assert worker["active"]
    assert worker["state"] in ("starting", "running", "idle", "searching", "parked",
                               "driving_reactor")
    # A Linux thread id of this process, once the thread runs.
    deadline = time.monotonic() + WAIT
    while not mt_asyncio.runtime_info()["workers"][0]["os_thread_id"]:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    tid = mt_asyncio.runtime_info()["workers"][0]["os_thread_id"]
    assert os.path.isdir(f"/proc/{os.getpid()}/task/{tid}")


def test_exception_in_unit_goes_to_unraisablehook(runtime, monkeypatch):
    caught = []
    got = threading.Event()

    def hook(unraisable):
        caught.append(unraisable.exc_type)
        got.set()

    monkeypatch.setattr(sys, "unraisablehook", hook)

    def boom():
        raise KeyError("boom")

    mt_asyncio._core.spawn(boom)
    assert got.wait(WAIT)
    assert caught == [KeyError]


def test_runtime_lifecycle_errors():
    with pytest.raises(RuntimeError):
        mt_asyncio._core.spawn(lambda: None)  # Not running.
    mt_asyncio.start_runtime(1)
    try:
        with pytest.raises(RuntimeError):
            mt_asyncio.start_runtime(1)
        with pytest.raises(TypeError):
            mt_asyncio._core.spawn(42)
    finally:
        mt_asyncio.shutdown_runtime()
        mt_asyncio.shutdown_runtime()  # Idempotent.
    for bad, exc in [(0, ValueError), (-1, ValueError), ("2", TypeError), (True, TypeError)]:
        with pytest.raises(exc):
            mt_asyncio.start_runtime(bad)
    with pytest.raises(ValueError):
        mt_asyncio.start_runtime(1, blocking_threadpool_size=0)


def test_runtime_configures_up_front_then_live():
    mt_asyncio.runtime(threads=3, blocking_threadpool_size=16,
                       blocking_threadpool_idle_ttl=5, context=True)
    try:
        info = mt_asyncio.runtime_info()
        assert info["state"] == "running"
        assert info["config"]["worker_threads"] == 3
        assert info["blocking"]["max_threads"] == 16
        assert info["config"]["blocking_idle_ttl_seconds"] == 5
        # Running already: workers, the blocking limit and its idle TTL
        # change live.
        mt_asyncio.runtime(threads=2, blocking_threadpool_size=8,
                           blocking_threadpool_idle_ttl=7)
        info = mt_asyncio.runtime_info()
        assert info["config"]["worker_threads"] == 2
        assert info["blocking"]["max_threads"] == 8
        assert info["config"]["blocking_idle_ttl_seconds"] == 7
        assert info["blocking"]["idle_ttl_seconds"] == 7
        with pytest.raises(RuntimeError, match="before the runtime starts"):
            mt_asyncio.runtime(blocking_threadpool_idle_ttl=0)

        async def main():
            return await mt_aio.gather(*(mt_aio.to_thread(pow, k, 2) for k in range(20)))

        assert mt_aio.run(main()) == [k * k for k in range(20)]
    finally:
        mt_asyncio.shutdown_runtime()


def test_runtime_rejects_bad_options():
    import signal
    for kwargs, exc in [({"threads": 0}, ValueError), ({"context": "yes"}, TypeError),
                        ({"blocking_threadpool_size": 0}, ValueError),
                        ({"blocking_threadpool_size": "8"}, TypeError),
                        ({"blocking_threadpool_idle_ttl": -1}, ValueError),
                        ({"signals": ["SIGTERM"]}, ValueError),
                        ({"signals": [signal.SIGKILL + 1000]}, ValueError),
                        ({"signals": signal.SIGTERM}, TypeError)]:
        with pytest.raises(exc):
            mt_asyncio.runtime(**kwargs)
        assert mt_asyncio.runtime_info()["state"] != "running", kwargs


def test_default_thread_count_is_cpus_plus_four():
    import os
    mt_asyncio.start_runtime()
    try:
        assert mt_asyncio.runtime_info()["config"]["worker_threads"] == (os.cpu_count() or 1) + 4
    finally:
        mt_asyncio.shutdown_runtime()


@pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded CPython build")
def test_gil_stays_disabled_while_workers_run(runtime):
    done = threading.Event()
    flags = []

    def unit():
        flags.append(sys._is_gil_enabled())
        done.set()

    mt_asyncio._core.spawn(unit)
    assert done.wait(WAIT)
    assert flags == [False]
    assert not sys._is_gil_enabled()



def test_loop_of_a_stopped_runtime_refuses_work():
    # A loop runs on the runtime it was made on. After that runtime shut
    # down (and another started), scheduling on the old loop raises rather
    # than handing work to a runtime that will never run it; new loops
    # work on the new runtime.
    mt_asyncio.start_runtime(1)
    old = mt_aio.new_event_loop()
    assert old.run_until_complete(mt_aio.sleep(0, "ran")) == "ran"
    mt_asyncio.shutdown_runtime()
    mt_asyncio.start_runtime(1)
    try:
        for schedule in (lambda: old.call_soon(print),
                         lambda: old.call_later(10, print),
                         lambda: old.call_soon_threadsafe(print)):
            with pytest.raises(RuntimeError, match="has shut down"):
                schedule()
        coro = mt_aio.sleep(0)
        with pytest.raises(RuntimeError, match="has shut down"):
            old.create_task(coro)
        coro.close()
        old.close()
        new = mt_aio.new_event_loop()
        try:
            assert new.run_until_complete(mt_aio.sleep(0, "new")) == "new"
        finally:
            new.close()
    finally:
        mt_asyncio.shutdown_runtime()


def test_admin_answers_any_task_name_as_utf8():
    # A task name is any str: a lone surrogate (a name made from undecoded
    # bytes) cannot travel as UTF-8 and once failed the whole ListTasks
    # page; an over-long name must be clipped at a code point, never mid
    # character. Control characters are data and come back as they are.
    from mt_asyncio import _admin

    names = {"surrogate": "bad\udcff-name", "escape": "ring\x1b]0;x\x07bell",
             "long": "é" * 1000}

    async def main():
        release = mt_aio.Event()
        tasks = [mt_aio.create_task(release.wait(), name=f"{key}:{name}")
                 for key, name in names.items()]
        await mt_aio.sleep(0)
        try:
            page = _admin.call("ListTasks", page_size=100)
            ids = ",".join(str(t["id"]) for t in page["tasks"])
            by_id = _admin.call("TaskNames", ids=ids)["names"]
        finally:
            release.set()
            await mt_aio.wait_for(mt_aio.gather(*tasks), WAIT)
        return page, by_id

    page, by_id = mt_aio.run(main())
    answered = {t["name"].split(":", 1)[0]: t["name"] for t in page["tasks"]
                if ":" in t["name"]}
    assert sorted(answered) == sorted(names)
    assert answered["surrogate"] == "surrogate:bad\ufffd-name"
    assert answered["escape"] == "escape:" + names["escape"]
    assert len(answered["long"]) == 300 and answered["long"].endswith("é...")
    for text in list(answered.values()) + list(by_id.values()):
        text.encode("utf-8")  # Every answer is valid UTF-8.
    assert sorted(by_id.values()) == sorted(t["name"] for t in page["tasks"])
