"""mt_asyncio.diagnose in process: what the Diagnose admin method answers
(its window over many waits, a stdlib primitive, the lock owner it reads,
the self-wakes it counts) and the long steps it records."""

import asyncio as stdlib_asyncio
import time

import pytest

import mt_asyncio
import mt_asyncio.asyncio as asyncio
from mt_asyncio import _admin, diagnose

WAIT = 30


@pytest.fixture(autouse=True)
def runtime():
    mt_asyncio.start_runtime(2)
    yield
    mt_asyncio.shutdown_runtime()


def diagnose_now(**request):
    return _admin.call("Diagnose", spin_window_seconds=0.05, **request)


def lost_names(answer):
    return sorted(t["name"] for f in answer.get("findings", [])
                  if f["kind"] == "FINDING_KIND_LOST_WAKEUP" for t in f["tasks"])


def run(main):
    return asyncio.run(asyncio.wait_for(main(), WAIT))


def test_many_waits_are_checked_a_window_at_a_time():
    async def main():
        queue = asyncio.Queue()  # Held by every consumer's coroutine.

        async def consume():
            await queue.get()

        async def lost():
            await asyncio.get_running_loop().create_future()

        tasks = [asyncio.create_task(consume()) for _ in range(diagnose.MAX_WALKED * 2)]
        tasks.append(asyncio.create_task(lost(), name="lost-late"))
        await asyncio.sleep(0.2)
        found, checked, total = [], 0, 0
        for _ in range(3):  # Three windows of 500 cover them all.
            answer = await asyncio.to_thread(diagnose_now)
            # These tasks, and this one waiting on the thread.
            total = int(answer["waits_total"])
            assert total >= len(tasks)
            assert int(answer["waits_checked"]) == diagnose.MAX_WALKED
            checked += diagnose.MAX_WALKED
            found += lost_names(answer)
        assert checked >= total
        assert found == ["lost-late"]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    run(main)


def test_lock_records_and_forgets_its_owner():
    async def main():
        lock = asyncio.Lock()
        assert lock._owner_task == 0
        me = asyncio.current_task()._mt_stats()[0]
        async with lock:
            assert lock._owner_task == me
        assert lock._owner_task == 0

        async def take():
            async with lock:
                return asyncio.current_task()._mt_stats()[0], lock._owner_task

        async with lock:
            other = asyncio.create_task(take())
            await asyncio.sleep(0.05)
        task_id, owner = await other  # Handed over: the waiter owns it now.
        assert owner == task_id

    run(main)


def test_self_wakes_count_only_bare_yields():
    async def main():
        async def spin():
            for _ in range(50):
                await asyncio.sleep(0)
            await asyncio.sleep(0.01)

        task = asyncio.create_task(spin())
        await task
        listed = _admin.call("ListTasks")  # Done tasks are not listed ...
        assert all(t["self_wakes"] <= t["steps"] for t in listed["tasks"])
        stats = task._mt_stats()
        if stats is not None:  # ... but a held one still has its figures.
            assert stats[6] == 50

    run(main)


def test_a_long_step_keeps_the_stack_it_had():
    async def main():
        def hold_the_worker():
            time.sleep(0.3)

        async def slow():
            hold_the_worker()

        before = len(diagnose.long_steps())
        await asyncio.create_task(slow(), name="slow")
        deadline = time.monotonic() + WAIT
        while len(diagnose.long_steps()) == before and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        step = diagnose.long_steps()[-1]
        assert step["running_seconds"] >= 0.1
        if diagnose.stacks_supported():
            functions = [frame[0] for frame in step["stack"]]
            assert functions[-1].endswith("hold_the_worker"), step
        else:
            assert step["note"]

    run(main)


def test_a_stdlib_primitive_is_found_by_the_walk():
    async def main():
        event = stdlib_asyncio.Event()

        async def wait():
            await event.wait()

        task = asyncio.create_task(wait(), name="stdlib-event")
        await asyncio.sleep(0.1)
        answer = await asyncio.to_thread(diagnose_now)
        kinds = {p["kind"]: p for p in answer["primitives"]}
        assert [w["task_name"] for w in kinds["Event"]["waiters"]] == ["stdlib-event"]
        assert lost_names(answer) == []  # The test's coroutine holds the event.
        event.set()
        await task

    run(main)


def test_bad_windows_are_refused():
    for bad in (-1, 6, "1", True):
        with pytest.raises(ValueError):
            _admin.call("Diagnose", spin_window_seconds=bad)
