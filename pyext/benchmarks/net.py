"""Network workloads: a server on one backend in its own process, a load
generator in another, so the server's cores are the server's.

``python net.py --serve BACKEND WORKLOAD THREADS`` runs a server and prints
``port <n>`` once it listens; it then answers commands on stdin: ``rss``
(its resident memory in bytes), ``balance`` (requests served per thread),
``quit``. ``python net.py --load WORKLOAD PORT SCALE`` runs the load and
prints one JSON line. bench.py drives both (``run_net_cell``).
"""

import collections
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

from workloads import echo_stream  # The in-process rows' handler too.

HERE = os.path.abspath(__file__)

# workload -> (connections, requests per connection, payload bytes)
NET_WORKLOADS = {
    "echo_protocol_1k": (32, 2000, 1024),
    "echo_streams_1k": (32, 2000, 1024),
    "http_cpu": (64, 100, 0),
    "tls_echo_1k": (16, 1000, 1024),
    "tls_echo_64k": (16, 100, 65536),
    # A new connection per request: a full handshake, 16 bytes each way.
    "tls_handshakes": (16, 100, 16),
    # http_cpu over TLS.
    "https_cpu": (64, 100, 0),
    "idle_conns": (10000, 0, 0),
    "db_http": (32, 200, 0),
}
HTTP_BURN = 5000  # CPU iterations per HTTP request (docs/benchmarks.md).
# db_http: each request reads a row from PostgreSQL (asyncpg), burns
# HTTP_BURN on it and replies; the server is started by the driver
# (pg_cluster.py from tests/libs, the database suite's private cluster).
DB_WORKLOADS = {"db_http"}
TLS_WORKLOADS = {"tls_echo_1k", "tls_echo_64k", "tls_handshakes", "https_cpu"}
DB_ROWS = 10000
_PG_CLUSTER_DIR = os.path.join(os.path.dirname(HERE), os.pardir, os.pardir,
                               "tests", "libs")


# PyPI's mt-asyncio 0.3.0a1 (Rust) shares our
# import name, so it runs from a venv of its own: $MT_ASYNCIO_030A1_PYTHON, or the
# one tools/setup.sh makes.
PYPI_MT_ASYNCIO_PYTHON = os.environ.get("MT_ASYNCIO_030A1_PYTHON") or os.path.expanduser(
    "~/.cache/mt_asyncio/mt-asyncio-0.3.0a1-venv/bin/python")


def net_backends():
    """Server backends available here."""
    found = ["asyncio", "asyncio-multiloop", "mt_asyncio", "mt_asyncio+ssl"]
    for peer in ("rloop", "uvloop"):
        try:
            __import__(peer)
            found.insert(1, peer)
        except ImportError:
            pass
    if os.access(PYPI_MT_ASYNCIO_PYTHON, os.X_OK):
        found.append("mt-asyncio-0.3.0a1")
    return found


def db_unavailable():
    """Why the database rows cannot run here, or None."""
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        return "asyncpg is not installed (tools/setup.sh installs it)"
    cluster = pg_cluster_module()
    if cluster is None:
        return f"pg_cluster.py not found in {_PG_CLUSTER_DIR}"
    if cluster.find_bindir() is None:
        return "no PostgreSQL server (tools/setup.sh installs Debian's postgresql)"
    return None


def pg_cluster_module():
    if _PG_CLUSTER_DIR not in sys.path:
        sys.path.insert(0, _PG_CLUSTER_DIR)
    try:
        import pg_cluster
    except ImportError:
        return None
    return pg_cluster


def burn(iterations):
    v = 0
    for i in range(iterations):
        v = (v * 1664525 + 1013904223 + i) & 0xFFFFFFFF
    return v


# --- servers --------------------------------------------------------------------

_served = collections.Counter()
_served_lock = threading.Lock()


def _count_request():
    ident = threading.get_native_id()
    with _served_lock:
        _served[ident] += 1


def _tls_server_context(backend):
    """The server's context: mt_asyncio's native engine (mt_asyncio.tls)
    for the mt_asyncio row, the ssl module's for every other (and for
    "mt_asyncio+ssl"); and the certificate's file, for the client."""
    import tlscerts
    native = backend == "mt_asyncio" and tlscerts.native_available()
    server, _ = tlscerts.contexts(native)
    return server, tlscerts.cert_and_key()[0]


def _make_server(aio, workload, sock_kwargs, ssl_ctx):
    """The coroutine that starts `workload`'s server on `aio`'s loop."""
    import asyncio as stdlib  # Base classes and exceptions (mt-asyncio 0.3.0a1's
    loop = aio.get_running_loop()  # namespace has no Protocol).

    class Echo(stdlib.Protocol):
        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.transport.write(data)

    async def http(reader, writer):
        body = b"x" * 32
        head = (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n"
                b"Content-Type: text/plain\r\n\r\n" % len(body))
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                burn(HTTP_BURN)
                _count_request()
                writer.write(head + body)
        except (stdlib.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def db_http(reader, writer):
        # One database connection per client connection, opened by the
        # handler: on mt_asyncio its protocol then lives on this
        # connection's strand, with the handler that uses it.
        import asyncpg
        db = await asyncpg.connect(**_pg_params())
        head = (b"HTTP/1.1 200 OK\r\nContent-Length: 32\r\n"
                b"Content-Type: text/plain\r\n\r\n")
        n = 0
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                n += 1
                payload = await db.fetchval(
                    "SELECT payload FROM bench_items WHERE id = $1", n % DB_ROWS)
                burn(HTTP_BURN + len(payload))
                _count_request()
                writer.write(head + payload[:32].encode())
        except (stdlib.IncompleteReadError, ConnectionError):
            pass
        finally:
            await db.close()
        writer.close()

    if workload in ("echo_protocol_1k", "idle_conns"):
        return loop.create_server(Echo, **sock_kwargs)
    if workload == "db_http":
        return aio.start_server(db_http, **sock_kwargs)
    if workload == "http_cpu":
        return aio.start_server(http, **sock_kwargs)
    if workload == "https_cpu":
        return aio.start_server(http, ssl=ssl_ctx, **sock_kwargs)
    if workload in TLS_WORKLOADS:
        return aio.start_server(echo_stream, ssl=ssl_ctx, **sock_kwargs)
    return aio.start_server(echo_stream, **sock_kwargs)


def _pg_params():
    return {"host": os.environ["MT_PG_HOST"], "port": int(os.environ["MT_PG_PORT"]),
            "user": os.environ["MT_PG_USER"], "database": os.environ["MT_PG_DBNAME"]}


async def _fill_bench_table():
    import asyncpg
    db = await asyncpg.connect(**_pg_params())
    try:
        await db.execute("CREATE TABLE IF NOT EXISTS bench_items "
                         "(id int PRIMARY KEY, payload text NOT NULL)")
        if await db.fetchval("SELECT count(*) FROM bench_items") < DB_ROWS:
            await db.execute("TRUNCATE bench_items")
            await db.copy_records_to_table(
                "bench_items", records=[(i, f"item {i:05d} " + "x" * 40)
                                        for i in range(DB_ROWS)])
    finally:
        await db.close()


def serve(backend, workload, threads):
    if workload in DB_WORKLOADS and backend == "mt_asyncio":
        # asyncpg is an unmodified asyncio library: each parallel runtime
        # runs it under its own compatibility layer, installed before
        # asyncpg is imported.
        import mt_asyncio.compat
        mt_asyncio.compat.install()
    elif workload in DB_WORKLOADS and backend == "mt-asyncio-0.3.0a1":
        import mt_asyncio.asyncio  # mt-asyncio 0.3.0a1's package, in its own venv.
        mt_asyncio.asyncio.compat.install()
    ssl_ctx, cafile = (_tls_server_context(backend) if workload in TLS_WORKLOADS
                       else (None, ""))
    ready = threading.Event()
    port = [0]
    stop = threading.Event()

    def run_loop(aio, runner, reuse_port, bind_port):
        async def main():
            if workload in DB_WORKLOADS and not bind_port:
                await _fill_bench_table()  # Once, by the first loop.
            kwargs = {"host": "127.0.0.1", "port": bind_port, "backlog": 4096}
            if reuse_port:
                kwargs["reuse_port"] = True
            server = await _make_server(aio, workload, kwargs, ssl_ctx)
            port[0] = server.sockets[0].getsockname()[1]
            ready.set()
            while not stop.is_set():
                await aio.sleep(0.05)
            server.close()
        runner(main())

    if backend in ("mt_asyncio", "mt_asyncio+ssl"):
        import mt_asyncio.asyncio as aio
        threads_ = [threading.Thread(target=run_loop, args=(
            aio, lambda c: aio.run(c, threads=threads), False, 0))]
    elif backend == "mt-asyncio-0.3.0a1":
        import mt_asyncio  # mt-asyncio 0.3.0a1's package, in its own venv.
        mt_asyncio.runtime(threads=threads, context=True)
        import mt_asyncio.asyncio as aio
        threads_ = [threading.Thread(target=run_loop, args=(aio, aio.run, False, 0))]
    elif backend == "uvloop":
        import asyncio as aio

        import uvloop
        threads_ = [threading.Thread(target=run_loop, args=(aio, uvloop.run, False, 0))]
    elif backend == "rloop":
        import asyncio as aio

        import rloop
        threads_ = [threading.Thread(target=run_loop, args=(
            aio, lambda c: aio.run(c, loop_factory=rloop.new_event_loop), False, 0))]
    elif backend == "asyncio":
        import asyncio as aio
        threads_ = [threading.Thread(target=run_loop, args=(aio, aio.run, False, 0))]
    elif backend == "asyncio-multiloop":
        # One loop per thread, each with its own listener on one port
        # (SO_REUSEPORT: the kernel spreads connections by hash).
        import asyncio as aio
        first = threading.Thread(target=run_loop, args=(aio, aio.run, True, 0))
        first.start()
        ready.wait(30)
        ready.clear()
        threads_ = [first]
        for _ in range(threads - 1):
            t = threading.Thread(target=run_loop, args=(aio, aio.run, True, port[0]))
            t.start()
            ready.wait(30)
            ready.clear()
            threads_.append(t)
        ready.set()
    else:
        raise ValueError(backend)
    for t in threads_:
        if not t.is_alive() and t.ident is None:
            t.start()
    # Until it listens, or its loop died (a peer that cannot serve this
    # workload): port 0 then, and the driver reports the error.
    deadline = time.monotonic() + 30
    while not ready.wait(0.02) and time.monotonic() < deadline:
        if not any(t.is_alive() for t in threads_):
            break
    print(f"port {port[0]}", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "rss":
            with open("/proc/self/statm") as f:
                pages = int(f.read().split()[1])
            print(pages * os.sysconf("SC_PAGE_SIZE"), flush=True)
        elif cmd == "cafile":
            print(cafile, flush=True)
        elif cmd == "balance":
            with _served_lock:
                print(json.dumps(sorted(_served.values(), reverse=True)), flush=True)
        elif cmd == "quit":
            break
    stop.set()
    for t in threads_:
        t.join(30)


# --- the load generator (stdlib asyncio, uvloop if it is there) -----------------------


def _client_loop_runner():
    import asyncio
    try:
        import uvloop
        return uvloop.run
    except ImportError:
        return asyncio.run


def load(workload, port, scale, cafile=None):
    import asyncio
    conns, requests, size = NET_WORKLOADS[workload]
    conns = max(1, int(conns * min(scale, 1.0))) if workload == "idle_conns" else conns
    requests = max(2, int(requests * scale))
    latencies = []

    async def one_echo(ctx):
        r, w = await asyncio.open_connection(
            "127.0.0.1", port, ssl=ctx, server_hostname="localhost" if ctx else None)
        payload = os.urandom(size)
        for _ in range(requests):
            t = time.perf_counter()
            w.write(payload)
            await r.readexactly(size)
            latencies.append(time.perf_counter() - t)
        w.close()

    async def one_handshakes(ctx):
        payload = os.urandom(size)
        for _ in range(requests):
            t = time.perf_counter()
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=ctx,
                                                 server_hostname="localhost")
            w.write(payload)
            await r.readexactly(size)
            w.close()
            await w.wait_closed()
            latencies.append(time.perf_counter() - t)

    async def one_http(ctx=None):
        r, w = await asyncio.open_connection(
            "127.0.0.1", port, ssl=ctx, server_hostname="localhost" if ctx else None)
        req = b"GET /work HTTP/1.1\r\nHost: bench\r\n\r\n"
        for _ in range(requests):
            t = time.perf_counter()
            w.write(req)
            await r.readuntil(b"\r\n\r\n")
            await r.readexactly(32)
            latencies.append(time.perf_counter() - t)
        w.close()

    async def main():
        ctx = None
        if cafile:
            ctx = ssl.create_default_context(cafile=cafile)
        if workload == "idle_conns":
            opened = []
            for i in range(0, conns, 200):
                opened += await asyncio.gather(*[
                    asyncio.open_connection("127.0.0.1", port)
                    for _ in range(min(200, conns - i))])
            print("open", flush=True)
            sys.stdin.readline()  # The driver measured the server meanwhile.
            for _, w in opened:
                w.close()
            return {"connections": len(opened)}
        if workload in ("http_cpu", "db_http", "https_cpu"):
            coros = [one_http(ctx) for _ in range(conns)]
        elif workload == "tls_handshakes":
            coros = [one_handshakes(ctx) for _ in range(conns)]
        else:
            coros = [one_echo(ctx) for _ in range(conns)]
        start = time.perf_counter()
        await asyncio.gather(*coros)
        elapsed = time.perf_counter() - start
        latencies.sort()

        def pct(p):
            return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

        return {"time": elapsed, "requests": len(latencies),
                "rps": len(latencies) / elapsed,
                "p50_ms": pct(0.50), "p95_ms": pct(0.95), "p99_ms": pct(0.99)}

    print(json.dumps(_client_loop_runner()(main())), flush=True)


# --- the driver's cell --------------------------------------------------------------------


class CellFailed(Exception):
    """The backend could not serve the workload; the message says why."""


_WARNING_LINE = re.compile(r"^\S+:\d+: \w*Warning: ")


def failure_reason(text):
    """What a failed process's stderr says went wrong, in one line: the
    exception, and for one without a message the function that raised it
    (peers raise a bare NotImplementedError for what they lack)."""
    # Warnings printed at exit (a peer's coroutine never awaited) come
    # after the traceback; they are not what failed.
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not _WARNING_LINE.match(line.strip())]
    if not lines:
        return ""
    if ": " in lines[-1]:
        return lines[-1]  # The exception says what it is.
    frames = [line for line in lines if line.startswith("File ") and ", in " in line]
    where = f" (in {frames[-1].rsplit(', in ', 1)[1]})" if frames else ""
    return lines[-1] + where


def _reason_in(f):
    f.seek(0)
    return failure_reason(f.read())


def run_net_cell(backend, workload, threads, scale):
    """One measurement: a fresh server process and a fresh client process.
    Returns rps and latencies (bytes per connection for idle_conns), and
    the per-thread balance of requests for http_cpu."""
    env = dict(os.environ)
    python = sys.executable
    if backend == "mt-asyncio-0.3.0a1":
        python = PYPI_MT_ASYNCIO_PYTHON
        env.pop("PYTHONPATH", None)  # Ours would shadow mt-asyncio 0.3.0a1's package.
    # The server's errors go to a file: a failed cell reports its last line.
    server_errors = tempfile.TemporaryFile("w+")
    server = subprocess.Popen(
        [python, HERE, "--serve", backend, workload, str(threads)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=server_errors,
        text=True, env=env)
    try:
        line = server.stdout.readline()
        port = int(line.split()[1]) if line.startswith("port ") else 0
        if port == 0:  # No listener: the serving loop died, its error written.
            raise CellFailed(_reason_in(server_errors)
                             or f"server {backend}/{workload} did not start")
        cafile = None
        if workload in TLS_WORKLOADS:
            cafile = _server_cafile(server)
        if workload == "idle_conns":
            server.stdin.write("rss\n")
            server.stdin.flush()
            before = int(server.stdout.readline())
        client = subprocess.Popen(
            [sys.executable, HERE, "--load", workload, str(port), str(scale)]
            + ([cafile] if cafile else []),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=dict(os.environ))
        if workload == "idle_conns":
            if client.stdout.readline().strip() != "open":
                raise RuntimeError("the idle-connection client failed")
            # Let the server finish accepting (the connections are open
            # on the client's side already).
            opened = NET_WORKLOADS["idle_conns"][0] * min(scale, 1.0)
            time.sleep(0.5 if opened > 1000 else 0.1)
            server.stdin.write("rss\n")
            server.stdin.flush()
            after = int(server.stdout.readline())
            client.stdin.write("done\n")
            client.stdin.flush()
        out, _ = client.communicate(timeout=600)
        if client.returncode != 0 or not out.strip():
            raise CellFailed(_reason_in(server_errors)
                             or f"the load client failed (exit {client.returncode})")
        result = json.loads(out.strip().splitlines()[-1])
        if workload == "idle_conns":
            result["bytes_per_conn"] = (after - before) / result["connections"]
        server.stdin.write("balance\n")
        server.stdin.flush()
        result["balance"] = json.loads(server.stdout.readline())
        server.stdin.write("quit\n")
        server.stdin.flush()
        server.wait(60)
        return result
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(60)
        server_errors.close()


def _server_cafile(server):
    server.stdin.write("cafile\n")
    server.stdin.flush()
    return server.stdout.readline().strip()


def main(argv):
    if argv[0] == "--serve":
        serve(argv[1], argv[2], int(argv[3]))
    elif argv[0] == "--load":
        load(argv[1], int(argv[2]), float(argv[3]), argv[4] if len(argv) > 4 else None)
    else:
        raise SystemExit("usage: net.py --serve BACKEND WORKLOAD THREADS | "
                         "--load WORKLOAD PORT SCALE [CAFILE]")


if __name__ == "__main__":
    main(sys.argv[1:])
