"""Real libraries, unmodified, on the parallel loop under compat.install():
aiohttp (server and client), websockets (server and client), uvicorn +
FastAPI with a CPU-bound endpoint hit by 64 clients, and httpx's async
client (anyio) against those servers. Each scenario runs 20 times and must
end cleanly every time: every request answered, servers and clients
closed, no error reported to the loop, no descriptor left open.

The libraries come from PyPI (tools/setup.sh installs them); a machine
without them skips this module with the reason printed."""

import gc
import os
import socket
import sysconfig
import threading
import time

import pytest

import mt_asyncio.compat

mt_asyncio.compat.install()  # Before the libraries import asyncio's names.

import asyncio  # noqa: E402 - stdlib's module, now pointing at ours.

aiohttp = pytest.importorskip("aiohttp", reason="aiohttp is not installed "
                              "(tools/setup.sh installs it)")
websockets = pytest.importorskip("websockets", reason="websockets is not installed")
uvicorn = pytest.importorskip("uvicorn", reason="uvicorn is not installed")
fastapi = pytest.importorskip("fastapi", reason="fastapi is not installed")
httpx = pytest.importorskip("httpx", reason="httpx is not installed")

from aiohttp import web  # noqa: E402
from websockets.asyncio.client import connect as ws_connect  # noqa: E402
from websockets.asyncio.server import serve as ws_serve  # noqa: E402

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
ROUNDS = int(os.environ.get("MT_LIBS_ROUNDS", "20"))
WAIT = 30  # Every wait here is bounded.


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def run_clean(main, threads=4):
    """Runs main() on the parallel loop ROUNDS times; each run must leave
    no error reported to the loop, and every run after the first (which
    may open what a library keeps for the process) no descriptor open."""
    baseline = None
    results = []
    for _ in range(ROUNDS):
        errors = []

        async def checked():
            asyncio.get_running_loop().set_exception_handler(
                lambda loop, ctx: errors.append(ctx))
            return await asyncio.wait_for(main(), WAIT)

        results.append(asyncio.run(checked(), threads=threads))
        assert errors == [], errors
        gc.collect()
        if baseline is None:
            baseline = open_fds()
            continue
        # Sockets a run closed as it ended may still be closing on a worker
        # (as stdlib drops them to the collector when its loop closes): a
        # run may end with fewer descriptors than the first left, never
        # with more. The lowest count seen is the bar for the next run.
        deadline = time.monotonic() + 2
        while open_fds() > baseline and time.monotonic() < deadline:
            time.sleep(0.01)
            gc.collect()
        now = open_fds()
        assert now <= baseline, (now, baseline)
        baseline = now
    return results


def free_port_socket():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(256)
    return sock


# --- aiohttp -------------------------------------------------------------------


async def aiohttp_app_server():
    async def echo(request):
        return web.Response(body=b"echo:" + await request.read())

    async def square(request):
        n = int(request.match_info["n"])
        return web.json_response({"n": n, "square": n * n})

    app = web.Application()
    app.router.add_post("/echo", echo)
    app.router.add_get("/square/{n}", square)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]


def test_aiohttp_server_and_client():
    async def main():
        runner, port = await aiohttp_app_server()
        try:
            async with aiohttp.ClientSession() as session:
                async def one(i):
                    async with session.post(f"http://127.0.0.1:{port}/echo",
                                            data=b"%d" % i) as r:
                        body = await r.read()
                    async with session.get(f"http://127.0.0.1:{port}/square/{i}") as r:
                        sq = (await r.json())["square"]
                    return body == b"echo:%d" % i and sq == i * i

                return all(await asyncio.gather(*[one(i) for i in range(50)]))
        finally:
            await runner.cleanup()

    assert run_clean(main) == [True] * ROUNDS


def test_httpx_against_aiohttp_server():
    async def main():
        runner, port = await aiohttp_app_server()
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                async def one(i):
                    r = await client.get(f"/square/{i}")
                    return r.json()["square"] == i * i

                return all(await asyncio.gather(*[one(i) for i in range(40)]))
        finally:
            await runner.cleanup()

    assert run_clean(main) == [True] * ROUNDS


# --- websockets -------------------------------------------------------------------


def test_websockets_server_and_client():
    async def reverse(ws):
        async for message in ws:
            await ws.send(message[::-1])

    async def main():
        async with ws_serve(reverse, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]

            async def client(i):
                async with ws_connect(f"ws://127.0.0.1:{port}") as ws:
                    for k in range(10):
                        await ws.send(f"{i}:{k}")
                        if await ws.recv() != f"{i}:{k}"[::-1]:
                            return False
                return True

            return all(await asyncio.gather(*[client(i) for i in range(30)]))

    assert run_clean(main) == [True] * ROUNDS


# --- uvicorn + FastAPI, hit by httpx --------------------------------------------------

app = fastapi.FastAPI()
handler_threads = set()
handler_threads_lock = threading.Lock()


@app.get("/cpu/{n}")
async def cpu(n: int):
    # CPU work inside the async handler: what the free-threading multiloop article measures.
    with handler_threads_lock:
        handler_threads.add(threading.get_native_id())
    total = 0
    for i in range(n):
        total += i * i
    return {"n": n, "total": total}


async def uvicorn_serving(sock):
    config = uvicorn.Config(app, log_level="warning", loop="none",
                            http="httptools", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.005)
    return server, task


def test_uvicorn_fastapi_cpu_endpoint_with_64_httpx_clients():
    handler_threads.clear()

    async def main():
        sock = free_port_socket()
        port = sock.getsockname()[1]
        server, task = await uvicorn_serving(sock)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}",
                                         timeout=WAIT) as client:
                async def hit(i):
                    r = await client.get(f"/cpu/{5000 + i}")
                    body = r.json()
                    return body["n"] == 5000 + i and \
                        body["total"] == sum(k * k for k in range(5000 + i))

                ok = all(await asyncio.gather(*[hit(i) for i in range(64)]))
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, WAIT)
            sock.close()
        return ok

    assert run_clean(main) == [True] * ROUNDS
    if FREE_THREADED:
        # The handlers ran on more than one worker (connections spread).
        assert len(handler_threads) >= 2, handler_threads


def test_websockets_client_against_uvicorn_and_httpx_streaming():
    @app.websocket("/ws")
    async def ws_upper(websocket: fastapi.WebSocket):
        await websocket.accept()
        while True:
            try:
                text = await websocket.receive_text()
            except fastapi.WebSocketDisconnect:
                return
            await websocket.send_text(text.upper())

    async def main():
        sock = free_port_socket()
        port = sock.getsockname()[1]
        server, task = await uvicorn_serving(sock)
        try:
            async def ws_client(i):
                async with ws_connect(f"ws://127.0.0.1:{port}/ws") as ws:
                    await ws.send(f"hi {i}")
                    return await ws.recv() == f"HI {i}"

            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                async with client.stream("GET", "/cpu/100") as r:
                    body = b"".join([chunk async for chunk in r.aiter_bytes()])
            ok = all(await asyncio.gather(*[ws_client(i) for i in range(10)]))
            return ok and b'"n":100' in body
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, WAIT)
            sock.close()

    assert run_clean(main) == [True] * ROUNDS
