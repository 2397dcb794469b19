"""Real libraries over the native TLS engine (mt_asyncio.tls), unmodified,
under compat.install(): aiohttp's HTTPS server and client (TLS beside the
socket on the engine), httpx's client (anyio runs TLS over wrap_bio(): the
engine's records, moved by Python), and uvicorn with its own
--ssl-certfile/--ssl-keyfile options under tls.install(). Each scenario
runs several times and must end cleanly: every request answered, no error
reported to the loop."""

import os
import ssl
import sys

import pytest

import mt_asyncio.compat

mt_asyncio.compat.install()  # Before the libraries import asyncio's names.

import asyncio  # noqa: E402 - stdlib's module, now pointing at ours.

from mt_asyncio import tls  # noqa: E402

aiohttp = pytest.importorskip("aiohttp", reason="aiohttp is not installed "
                              "(tools/setup.sh installs it)")
uvicorn = pytest.importorskip("uvicorn", reason="uvicorn is not installed")
fastapi = pytest.importorskip("fastapi", reason="fastapi is not installed")
httpx = pytest.importorskip("httpx", reason="httpx is not installed")

from aiohttp import web  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "control"))
import certs  # noqa: E402

ROUNDS = int(os.environ.get("MT_LIBS_ROUNDS", "5"))
WAIT = 30


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("tls"))
    why = certs.make(folder)
    if why:
        pytest.skip(why)
    return folder


def client_context(files):
    ctx = tls.create_default_context(cafile=os.path.join(files, "ca.pem"))
    # The control plane's test CA has no keyUsage, which OpenSSL's strict
    # mode refuses (the ssl module mirrors the setting).
    ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return ctx


def server_context(files):
    ctx = tls.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(os.path.join(files, "server.pem"), os.path.join(files, "server.key"))
    return ctx


def run_clean(main, threads=4):
    results = []
    for _ in range(ROUNDS):
        errors = []

        async def checked():
            asyncio.get_running_loop().set_exception_handler(
                lambda loop, ctx: errors.append(ctx))
            return await asyncio.wait_for(main(), WAIT)

        results.append(asyncio.run(checked(), threads=threads))
        assert errors == [], errors
    return results


async def aiohttp_https_server(files, seen):
    async def square(request):
        seen.append(request.transport._is_tls)
        n = int(request.match_info["n"])
        return web.json_response({"n": n, "square": n * n})

    app = web.Application()
    app.router.add_get("/square/{n}", square)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context(files))
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]


def test_aiohttp_https_server_and_client(files):
    async def main():
        seen = []
        runner, port = await aiohttp_https_server(files, seen)
        ctx = client_context(files)
        made = []

        class Recording(aiohttp.TCPConnector):
            # Which transports the client's connections got.
            async def _wrap_create_connection(self, *args, **kwargs):
                transport, protocol = await super()._wrap_create_connection(*args, **kwargs)
                made.append(transport)
                return transport, protocol

        try:
            async with aiohttp.ClientSession(connector=Recording()) as session:
                async def one(i):
                    async with session.get(f"https://localhost:{port}/square/{i}",
                                           ssl=ctx) as r:
                        return (await r.json())["square"] == i * i
                ok = all(await asyncio.gather(*[one(i) for i in range(30)]))
        finally:
            await runner.cleanup()
        return ok and seen and all(seen) and made and all(t._is_tls for t in made)

    assert run_clean(main) == [True] * ROUNDS


def test_httpx_against_aiohttp_https(files):
    async def main():
        seen = []
        runner, port = await aiohttp_https_server(files, seen)
        try:
            async with httpx.AsyncClient(verify=client_context(files)) as client:
                async def one(i):
                    r = await client.get(f"https://localhost:{port}/square/{i}")
                    stream = r.extensions["network_stream"]
                    engine = isinstance(stream.get_extra_info("ssl_object"), tls.TLSBIOObject)
                    return r.json()["square"] == i * i and engine
                ok = all(await asyncio.gather(*[one(i) for i in range(20)]))
        finally:
            await runner.cleanup()
        return ok and all(seen)

    assert run_clean(main) == [True] * ROUNDS


app = fastapi.FastAPI()


@app.get("/cpu/{n}")
async def cpu(n: int):
    return {"n": n, "total": sum(i * i for i in range(n))}


def test_uvicorn_with_its_own_ssl_options_under_install(files):
    async def main():
        sock = __import__("socket").socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        tls.install()
        try:
            # uvicorn makes its own context with ssl.SSLContext(...).
            config = uvicorn.Config(app, log_level="warning", loop="none", http="httptools",
                                    ssl_certfile=os.path.join(files, "server.pem"),
                                    ssl_keyfile=os.path.join(files, "server.key"))
            config.load()
        finally:
            tls.uninstall()
        assert isinstance(config.ssl, tls.TLSContext)
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.005)
        try:
            async with httpx.AsyncClient(base_url=f"https://localhost:{port}",
                                         verify=client_context(files)) as client:
                async def hit(i):
                    r = await client.get(f"/cpu/{100 + i}")
                    return r.json()["total"] == sum(k * k for k in range(100 + i))
                ok = all(await asyncio.gather(*[hit(i) for i in range(16)]))
                native = [c.transport._is_tls for c in server.server_state.connections]
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, WAIT)
            sock.close()
        return ok and native and all(native)

    assert run_clean(main) == [True] * ROUNDS
