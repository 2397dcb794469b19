"""The soak's service: what a real asyncio service runs, on mt_asyncio.

Started by soak.py (the driver) under `compat.install()` with the control
plane served from the environment (MT_ASYNCIO_CONTROL=1), so the libraries
in it (aiohttp) run unmodified on the parallel loop. It serves:

- an aiohttp app over TCP: small answers, 64 KiB bodies echoed with their
  digest, CPU handlers, sleeps, to_thread jobs, subprocesses, TaskGroup
  bursts, and a slow handler that clients disconnect from (the handler is
  cancelled);
- a line protocol (`<id> <hex payload>` -> `<id> <sha1 of payload>`) over
  TCP, a Unix socket and TLS;

and keeps busy on its own: a three-stage queue pipeline, call_later timers
checked for firing early, and bursts of short tasks. Every task the loop
creates is counted by a task factory: created, and how each ended.

It reports on stdout, one JSON object a line: "ready" (ports, pid), a
"stats" line every second, and "exit" after the loop has stopped (a
coordinated shutdown through the control plane ends it).
"""

import argparse
import asyncio
import collections
import gc
import hashlib
import json
import os
import ssl
import sys
import threading
import time

import mt_asyncio
import mt_asyncio.control

mt_asyncio.compat.install()

from aiohttp import web  # noqa: E402 - after install(), as a user would.

class Counts:
    """Counters bumped from every worker, read as one snapshot."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts = collections.Counter()
        self.failures = collections.Counter()  # Failed tasks by exception type.

    def bump(self, key, n=1):
        with self._lock:
            self._counts[key] += n

    def failed(self, exc):
        with self._lock:
            self._counts["tasks_failed"] += 1
            self.failures[type(exc).__name__] += 1

    def get(self, key):
        with self._lock:
            return self._counts[key]

    def snapshot(self):
        with self._lock:
            return dict(self._counts), dict(self.failures)


counts = Counts()
bump = counts.bump


def emit(event, **fields):
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


# --- task accounting -----------------------------------------------------------

def _task_done(task):
    if task.cancelled():
        bump("tasks_cancelled")
        return
    exc = task.exception()
    if exc is None:
        bump("tasks_ok")
    else:
        counts.failed(exc)


def task_factory(loop, coro, **kwargs):
    task = asyncio.Task(coro, loop=loop, **kwargs)
    bump("tasks_created")
    task.add_done_callback(_task_done)
    return task


# --- the aiohttp app -------------------------------------------------------------

def _cpu(n):
    total = 0
    for k in range(n):
        total += k * k
    return total


async def small(request):
    bump("http_small")
    return web.Response(text=f"ok {request.query.get('i', '')}")


async def echo(request):
    body = await request.read()
    bump("http_echo")
    return web.Response(body=hashlib.sha256(body).hexdigest().encode() + b" " +
                        str(len(body)).encode())


async def cpu(request):
    n = int(request.query.get("n", "20000"))
    bump("http_cpu")
    return web.Response(text=str(_cpu(n)))


async def sleep(request):
    await asyncio.sleep(int(request.query.get("ms", "10")) / 1000)
    bump("http_sleep")
    return web.Response(text="slept")


async def thread(request):
    data = request.query.get("d", "x").encode()
    digest = await asyncio.to_thread(lambda: hashlib.sha256(data * 1000).hexdigest())
    bump("http_thread")
    return web.Response(text=digest)


async def subprocess_(request):
    word = request.query.get("w", "hi")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; print(sys.stdin.read().upper())",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate(word.encode())
    bump("http_subprocess")
    return web.Response(text=out.decode().strip() + f" {proc.returncode}")


async def burst(request):
    n = int(request.query.get("n", "100"))

    async def one(k):
        await asyncio.sleep(0)
        return k * 2

    async with asyncio.TaskGroup() as tg:
        ts = [tg.create_task(one(k)) for k in range(n)]
    bump("http_burst")
    return web.Response(text=str(sum(t.result() for t in ts)))


async def slow(request):
    # Clients give up on this one: the handler is cancelled when they go.
    try:
        await asyncio.sleep(float(request.query.get("s", "2")))
    except asyncio.CancelledError:
        bump("http_slow_cancelled")
        raise
    bump("http_slow_answered")
    return web.Response(text="slow")


def make_app():
    app = web.Application()
    app.add_routes([web.get("/small", small), web.post("/echo", echo),
                    web.get("/cpu", cpu), web.get("/sleep", sleep),
                    web.get("/thread", thread), web.get("/subprocess", subprocess_),
                    web.get("/burst", burst), web.get("/slow", slow)])
    return app


# --- the line protocol ------------------------------------------------------------

async def line_handler(reader, writer):
    try:
        while line := await reader.readline():
            ident, _, payload = line.strip().partition(b" ")
            digest = hashlib.sha1(bytes.fromhex(payload.decode())).hexdigest()
            writer.write(ident + b" " + digest.encode() + b"\n")
            await writer.drain()
            bump("line_requests")
    except (ConnectionError, asyncio.IncompleteReadError):
        bump("line_resets")
    finally:
        writer.close()


# --- work of its own ---------------------------------------------------------------

async def pipeline():
    first, second = asyncio.Queue(maxsize=64), asyncio.Queue(maxsize=64)

    async def produce():
        n = 0
        while True:
            await first.put(n)
            n += 1
            await asyncio.sleep(0.002)

    async def stage():
        while True:
            n = await first.get()
            await second.put(n * 3)
            first.task_done()

    async def consume():
        expected = 0
        while True:
            v = await second.get()
            # One stage: the order is the producer's.
            if v != expected * 3:
                bump("pipeline_wrong")
            expected += 1
            bump("pipeline_items")
            second.task_done()

    async with asyncio.TaskGroup() as tg:
        for coro in (produce(), stage(), consume()):
            tg.create_task(coro)


async def timers():
    loop = asyncio.get_running_loop()
    while True:
        fired = loop.create_future()
        delay = 0.01 + (counts.get("timers_fired") % 7) * 0.003
        start = loop.time()
        loop.call_later(delay, lambda: fired.done() or fired.set_result(loop.time()))
        when = await fired
        bump("timers_fired")
        if when - start < delay - 1e-4:
            bump("timers_early")


async def short_bursts():
    async def one(k):
        await asyncio.sleep(0)
        return k

    while True:
        results = await asyncio.gather(*(one(k) for k in range(200)))
        if results != list(range(200)):
            bump("bursts_wrong")
        bump("bursts")
        await asyncio.sleep(0.05)


async def stats():
    while True:
        await asyncio.sleep(1)
        info = mt_asyncio.runtime_info()
        snapshot, _ = counts.snapshot()
        emit("stats", stalls=info["stalls_detected"],
             workers=info["config"]["worker_threads"], gc_runs=gc_runs[0],
             gc_collected=gc_collected[0], **snapshot)


async def census(every):
    """MT_SOAK_CENSUS=<seconds>: live objects by type, to find what grows."""
    previous = collections.Counter()
    while True:
        await asyncio.sleep(every)
        now = collections.Counter(type(o).__name__ for o in gc.get_objects())
        grown = (now - previous).most_common(12)
        previous = now
        garbage = None
        if os.environ.get("MT_SOAK_GARBAGE"):
            # What the cycle collector would free now, by type: the cycles
            # this service makes. A diagnosis only: it forces a collection.
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                gc.collect()
                garbage = collections.Counter(type(o).__name__ for o in gc.garbage)
                garbage = [len(gc.garbage), garbage.most_common(25)]
                gc.garbage.clear()
            finally:
                gc.set_debug(0)
            gc.collect()  # What DEBUG_SAVEALL kept, freed.
        emit("census", objects=sum(now.values()), grown=grown, garbage=garbage)


# --- main ---------------------------------------------------------------------------

gc_runs = [0]


gc_collected = [0]  # Objects the cycle collector freed: garbage that was in cycles.


def _count_gc(phase, info):
    if phase == "start":
        gc_runs[0] += 1
    else:
        gc_collected[0] += info.get("collected", 0)


async def main(args):
    loop = asyncio.get_running_loop()
    loop.set_task_factory(task_factory)
    # Handlers are cancelled when their client goes away (aiohttp's
    # default since 3.9 is to let them finish).
    runner = web.AppRunner(make_app(), handle_signals=False, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    http_port = site._server.sockets[0].getsockname()[1]
    line_tcp = await asyncio.start_server(line_handler, "127.0.0.1", 0)
    unix_path = os.path.join(args.folder, "line.sock")
    line_unix = await asyncio.start_unix_server(line_handler, unix_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(os.path.join(args.folder, "server.pem"),
                        os.path.join(args.folder, "server.key"))
    line_tls = await asyncio.start_server(line_handler, "127.0.0.1", 0, ssl=tls)
    own = [asyncio.create_task(c) for c in (pipeline(), timers(), short_bursts(), stats())]
    if os.environ.get("MT_SOAK_CENSUS"):
        own.append(asyncio.create_task(census(float(os.environ["MT_SOAK_CENSUS"]))))
    emit("ready", pid=os.getpid(), http_port=http_port,
         tcp_port=line_tcp.sockets[0].getsockname()[1],
         tls_port=line_tls.sockets[0].getsockname()[1], unix_path=unix_path)
    try:
        await asyncio.Event().wait()  # Until the shutdown cancels main.
    finally:
        for t in own:
            t.cancel()
        await asyncio.gather(*own, return_exceptions=True)
        for server in (line_tcp, line_unix, line_tls):
            server.close()
        await runner.cleanup()


def run():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--folder", required=True)
    args = parser.parse_args()
    gc.callbacks.append(_count_gc)
    started = time.monotonic()
    try:
        asyncio.run(main(args), threads=args.threads)
    except asyncio.CancelledError:
        pass  # The coordinated shutdown's cancel reached main: a normal end.
    finally:
        try:
            stalls = mt_asyncio.runtime_info()["stalls_detected"]
        except Exception:  # The runtime is gone after the shutdown.
            stalls = None
        snapshot, failures = counts.snapshot()
        emit("exit", seconds=round(time.monotonic() - started, 3),
             gc_runs=gc_runs[0], gc_collected=gc_collected[0], stalls=stalls, failures=failures, **snapshot)
    sys.exit(0)


if __name__ == "__main__":
    run()
