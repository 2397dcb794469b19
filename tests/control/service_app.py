"""A small live service for the control plane's end-to-end suite.

Runs on mt_asyncio with the control plane served from the environment
(MT_ASYNCIO_CONTROL=1) and keeps busy the way a real service does: CPU
steps on several workers, a queue pipeline, to_thread jobs, a TCP echo
server with a slow request, and batches of short tasks the suite counts
while it resizes the pools. It reports on stdout, one JSON object a line,
so the suite can follow it:

  {"event": "ready", "pid": ..., "port": ...}
  {"event": "batch", "done": N, "expected": N}   one per finished batch
  {"event": "exit", ...}                          counts at the end

With --tick-file PATH the spinners count their rounds ("ticks") and a
thread writes the count and the time it was read (two native 64-bit
integers: ticks, CLOCK_MONOTONIC nanoseconds) into that 16-byte file every
20 ms, so a suite can follow the workload's rate from outside without
asking the process anything. --tasks N adds N tasks that wait forever (a
process with many tasks to list). With --hang-thread one to_thread job
never returns (a shutdown must give up on it). With --hostile-name one
waiting task is named with what a process may hold and a terminal must
never act on: an escape sequence, a bell, a lone surrogate and a long run
of two-byte characters.
"""

import argparse
import asyncio as _stdlib_asyncio  # noqa: F401 - the names the app uses are ours.
import json
import sys
import threading
import time

import mt_asyncio
import mt_asyncio.asyncio as asyncio
import mt_asyncio.control

HOSTILE_NAME = "hostile\x1b]0;owned\x07-\udcff-" + "\u00e9" * 400
counters = {"batches": 0, "batch_tasks_done": 0, "pipeline_items": 0,
            "thread_jobs": 0, "finally_ran": 0, "cancelled": 0, "requests": 0}
lock = threading.Lock()


def bump(key, n=1):
    with lock:
        counters[key] += n


def emit(**fields):
    print(json.dumps(fields), flush=True)


async def guarded(coro_fn, *args):
    """Every long-lived task counts its cancellation and its finally."""
    try:
        return await coro_fn(*args)
    except asyncio.CancelledError:
        bump("cancelled")
        raise
    finally:
        bump("finally_ran")


ticks = [0] * 4  # One slot per spinner: no lock on the hot path.


async def spinner(i):
    while True:
        total = 0
        for k in range(20_000):
            total += k
        ticks[i] += 1
        await asyncio.sleep(0.005)


def publish_ticks(path, stop):
    """Writes (ticks, now) into `path` every 20 ms until `stop` is set."""
    import mmap
    import struct
    with open(path, "w+b") as f:
        f.write(b"\0" * 16)
        f.flush()
        with mmap.mmap(f.fileno(), 16) as shared:
            while not stop.wait(0.02):
                # One 16-byte store; a reader that fears a torn pair reads twice.
                shared[:16] = struct.pack("=QQ", sum(ticks), time.monotonic_ns())


async def producer(queue):
    n = 0
    while True:
        await queue.put(n)
        n += 1
        await asyncio.sleep(0.001)


async def consumer(queue):
    while True:
        await queue.get()
        bump("pipeline_items")
        queue.task_done()


async def thread_jobs():
    while True:
        await asyncio.to_thread(time.sleep, 0.01)
        bump("thread_jobs")


async def batches(size, pause):
    """Waves of short tasks: the suite checks none is lost while it
    resizes the worker pool under them."""
    async def small(k):
        await asyncio.sleep(0)
        total = 0
        for j in range(200):
            total += j * k
        return k

    while True:
        results = await asyncio.gather(*(small(k) for k in range(size)))
        done = sum(1 for k, r in enumerate(results) if r == k)
        bump("batches")
        bump("batch_tasks_done", done)
        emit(event="batch", done=done, expected=size)
        await asyncio.sleep(pause)


async def handle(reader, writer):
    try:
        while line := await reader.readline():
            if line.startswith(b"slow"):
                await asyncio.sleep(0.5)  # A request in flight at shutdown.
            writer.write(line)
            await writer.drain()
            bump("requests")
    finally:
        writer.close()


async def main(args):
    queue = asyncio.Queue(maxsize=100)
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    tasks = [asyncio.create_task(guarded(spinner, i), name=f"spinner-{i}") for i in range(4)]
    tasks += [
        asyncio.create_task(guarded(producer, queue), name="producer"),
        asyncio.create_task(guarded(consumer, queue), name="consumer"),
        asyncio.create_task(guarded(thread_jobs), name="thread-jobs"),
        asyncio.create_task(guarded(batches, args.batch, args.pause), name="batches"),
    ]
    tasks += [asyncio.create_task(guarded(asyncio.sleep, 3600), name=f"idle-{k}")
              for k in range(args.tasks)]
    if args.hostile_name:
        tasks.append(asyncio.create_task(guarded(asyncio.sleep, 3600), name=HOSTILE_NAME))
    if args.hang_thread:
        never = threading.Event()
        tasks.append(asyncio.create_task(
            guarded(asyncio.to_thread, never.wait), name="hung-thread-job"))
    control = mt_asyncio.control._from_env
    emit(event="ready", pid=__import__("os").getpid(), port=port,
         control_tcp_port=control.tcp_port if control is not None else None,
         health_port=control.health_port if control is not None else None)
    try:
        async with server:
            # One task cancelled by an operator does not end the service.
            await asyncio.gather(*tasks, return_exceptions=True)
    except asyncio.CancelledError:
        pass  # A shutdown: everything below still runs.
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def run():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--pause", type=float, default=0.05)
    parser.add_argument("--hang-thread", action="store_true")
    parser.add_argument("--hostile-name", action="store_true")
    parser.add_argument("--tick-file")
    parser.add_argument("--tasks", type=int, default=0)
    args = parser.parse_args()
    started = time.monotonic()
    if args.tick_file:
        stop_ticks = threading.Event()
        threading.Thread(target=publish_ticks, args=(args.tick_file, stop_ticks),
                         daemon=True).start()
    try:
        asyncio.run(main(args), threads=args.threads)
    except asyncio.CancelledError:
        # A shutdown whose cancel phase caught main still unwinding (its
        # grace ran out): run() raises the main task's CancelledError, as
        # documented; for a service that is a normal end.
        pass
    finally:
        with lock:
            emit(event="exit", seconds=round(time.monotonic() - started, 3),
                 state=mt_asyncio.runtime_info()["state"], **counters)
    sys.exit(0)


if __name__ == "__main__":
    run()
