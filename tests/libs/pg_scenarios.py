"""PostgreSQL through psycopg 3 (with psycopg_pool) and asyncpg, unmodified,
on whichever backend backend_child.py set up. Each scenario returns what a
user of the driver observes; on mt_asyncio it must equal stdlib's.

The server is the private cluster pg_cluster.py starts (a Unix socket in a
temporary folder); its parameters come from MT_PG_* in the environment.
The restart scenarios restart it, so they run last."""

import asyncio
import io
import os
import time

import asyncpg
import psycopg
import psycopg_pool
from psycopg import errors as pg_errors
from psycopg import sql

SCENARIOS = {}

HOST = os.environ.get("MT_PG_HOST", "/tmp")
PORT = int(os.environ.get("MT_PG_PORT", "5432"))
USER = os.environ.get("MT_PG_USER", "postgres")
DBNAME = os.environ.get("MT_PG_DBNAME", "postgres")
CONNINFO = f"host={HOST} port={PORT} user={USER} dbname={DBNAME}"
WAIT = 30  # Every wait on the server is bounded.


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


async def psycopg_connect(**kwargs):
    return await psycopg.AsyncConnection.connect(CONNINFO, **kwargs)


async def asyncpg_connect():
    return await asyncpg.connect(host=HOST, port=PORT, user=USER,
                                 database=DBNAME)


async def wait_until_active(conn, marker):
    """Polls pg_stat_activity (through conn) until a query containing
    marker runs on the server."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
            "AND query LIKE %s AND pid <> pg_backend_pid()", (f"%{marker}%",))
        if (await cur.fetchone())[0]:
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(f"no query with {marker!r} became active")


async def cancel_once_active(watcher, marker, query):
    """Runs `query` (a coroutine) in a task and cancels the task once the
    server runs it: (what awaiting the task gave, whether that was quick)."""
    started = time.monotonic()
    task = asyncio.create_task(query)
    await wait_until_active(watcher, marker)
    task.cancel()
    try:
        await task
        outcome = "completed"
    except asyncio.CancelledError:
        outcome = "CancelledError"
    return outcome, time.monotonic() - started < 15


def cpu_work(i):
    """What a handler computes between queries."""
    return sum((i * k) % 7 for k in range(2000))


def error_name(exc):
    return f"{type(exc).__module__}.{type(exc).__name__}"


TYPES_QUERY = (
    "SELECT 42::int4, 9000000000::int8, 'héllo'::text, 12.50::numeric, "
    "true, NULL::int, ARRAY[1,2,3], '{\"a\": [1, 2]}'::jsonb, "
    "'2026-12-01 10:00:00+00'::timestamptz, '\\xdeadbeef'::bytea, "
    "'12:30'::time, 2.5::float8")


# Each fails on the server differently (u has a row with id 1).
FAILING_QUERIES = ("INSERT INTO u VALUES (1)", "SELEC 1", "SELECT 1/0",
                   "SELECT * FROM missing_table", "SELECT 'x'::int")


# --- psycopg 3 --------------------------------------------------------------

@scenario
async def psycopg_types_and_large_results():
    async with await psycopg_connect() as conn:
        cur = await conn.execute(TYPES_QUERY)
        row = await cur.fetchone()
        cur = await conn.execute("SELECT g, md5(g::text) FROM generate_series(1, 50000) g")
        rows = await cur.fetchall()
        # A server-side cursor, fetched in chunks.
        async with conn.transaction():
            async with conn.cursor(name="big") as named:
                named.itersize = 700
                await named.execute("SELECT g FROM generate_series(1, 5000) g")
                streamed = [r[0] async for r in named]
        return {"row": row, "count": len(rows),
                "sum": sum(r[0] for r in rows), "last": rows[-1][1],
                "streamed": [len(streamed), sum(streamed)],
                "status": conn.info.transaction_status.name}


@scenario
async def psycopg_transactions_and_savepoints():
    async with await psycopg_connect() as conn:
        await conn.execute("CREATE TEMP TABLE t (id int PRIMARY KEY, v text)")
        await conn.commit()
        async with conn.transaction():
            await conn.execute("INSERT INTO t VALUES (1, 'kept')")
            try:
                async with conn.transaction():  # A savepoint.
                    await conn.execute("INSERT INTO t VALUES (2, 'undone')")
                    raise ValueError("roll the savepoint back")
            except ValueError:
                pass
            async with conn.transaction() as inner:
                await conn.execute("INSERT INTO t VALUES (3, 'rolled back')")
                raise psycopg.Rollback(inner)
            await conn.execute("INSERT INTO t VALUES (4, 'kept too')")
        try:
            async with conn.transaction():
                await conn.execute("INSERT INTO t VALUES (5, 'whole block undone')")
                raise KeyError("abort")
        except KeyError:
            pass
        cur = await conn.execute("SELECT id, v FROM t ORDER BY id")
        return {"rows": await cur.fetchall(),
                "status": conn.info.transaction_status.name}


@scenario
async def psycopg_server_errors():
    observed = []
    async with await psycopg_connect() as conn:
        await conn.execute("CREATE TEMP TABLE u (id int PRIMARY KEY)")
        await conn.execute("INSERT INTO u VALUES (1)")
        await conn.commit()
        for query in FAILING_QUERIES:
            try:
                await conn.execute(query)
            except psycopg.Error as e:
                observed.append([type(e).__name__, e.sqlstate,
                                 conn.info.transaction_status.name])
                # Until the rollback the transaction refuses everything.
                try:
                    await conn.execute("SELECT 1")
                except pg_errors.InFailedSqlTransaction as again:
                    observed.append(type(again).__name__)
                await conn.rollback()
        cur = await conn.execute("SELECT count(*) FROM u")
        observed.append((await cur.fetchone())[0])
    return observed


@scenario
async def psycopg_listen_notify():
    async with await psycopg_connect(autocommit=True) as listener, \
            await psycopg_connect(autocommit=True) as sender:
        await listener.execute("LISTEN jobs")

        async def send():
            for i in range(5):
                await sender.execute(sql.SQL("NOTIFY jobs, {}").format(f"job-{i}"))
            # Notifications sent in a transaction arrive at its commit.
            async with sender.transaction():
                await sender.execute("SELECT pg_notify('jobs', 'in-tx-1')")
                await sender.execute("SELECT pg_notify('jobs', 'in-tx-2')")

        sending = asyncio.create_task(send())
        received = [(n.channel, n.payload)
                    async for n in listener.notifies(timeout=WAIT, stop_after=7)]
        await sending
        return received


@scenario
async def psycopg_copy_in_and_out():
    async with await psycopg_connect() as conn:
        await conn.execute("CREATE TEMP TABLE c (id int, name text, score float8)")
        async with conn.cursor() as cur:
            async with cur.copy("COPY c (id, name, score) FROM STDIN") as copy:
                for i in range(20000):
                    await copy.write_row((i, f"name {i}\t\\", i / 4))
            async with cur.copy("COPY c FROM STDIN") as copy:
                await copy.write(b"-1\traw block\t0.5\n-2\t\\N\t1.5\n")
            out = []
            async with cur.copy("COPY (SELECT id, name, score FROM c ORDER BY id) "
                                "TO STDOUT") as copy:
                copy.set_types(["int4", "text", "float8"])
                async for row in copy.rows():
                    out.append(row)
        return {"rows": len(out), "first": out[:3], "last": out[-1],
                "id_sum": sum(r[0] for r in out),
                "score_sum": sum(r[2] for r in out)}


@scenario
async def psycopg_cancel_running_query_by_task_cancel():
    async with await psycopg_connect() as conn, \
            await psycopg_connect(autocommit=True) as watcher:
        outcome, quick = await cancel_once_active(
            watcher, "cancel-me", conn.execute("SELECT pg_sleep(30) /* cancel-me */"))
        await conn.rollback()
        cur = await conn.execute("SELECT 'still usable'")
        return [outcome, quick, (await cur.fetchone())[0], conn.closed]


@scenario
async def psycopg_cancel_safe_from_another_task():
    async with await psycopg_connect() as conn, \
            await psycopg_connect(autocommit=True) as watcher:
        query = asyncio.create_task(conn.execute("SELECT pg_sleep(30) /* cancel-safe */"))
        await wait_until_active(watcher, "cancel-safe")
        await conn.cancel_safe(timeout=WAIT)
        try:
            await query
            outcome = "completed"
        except pg_errors.QueryCanceled as e:
            outcome = [type(e).__name__, e.sqlstate]
        await conn.rollback()
        cur = await conn.execute("SELECT 1")
        return [outcome, (await cur.fetchone())[0]]


@scenario
async def psycopg_timeouts():
    observed = []
    async with await psycopg_connect() as conn:
        try:
            await asyncio.wait_for(conn.execute("SELECT pg_sleep(30)"), 0.3)
        except TimeoutError as e:
            observed.append(type(e).__name__)
        await conn.rollback()
        await conn.execute("SET statement_timeout = 200")
        try:
            await conn.execute("SELECT pg_sleep(30)")
        except pg_errors.QueryCanceled as e:
            observed.append([type(e).__name__, e.sqlstate])
        await conn.rollback()
        cur = await conn.execute("SELECT 2")
        observed.append((await cur.fetchone())[0])
    return observed


@scenario
async def psycopg_pipeline_mode():
    async with await psycopg_connect() as conn:
        await conn.execute("CREATE TEMP TABLE p (id int)")
        async with conn.pipeline():
            cursors = []
            for i in range(200):
                await conn.execute("INSERT INTO p VALUES (%s)", (i,))
                if i % 50 == 0:
                    cursors.append(await conn.execute("SELECT count(*) FROM p"))
        counts = [(await c.fetchone())[0] for c in cursors]
        cur = await conn.execute("SELECT sum(id) FROM p")
        return [counts, (await cur.fetchone())[0]]


@scenario
async def psycopg_pool_16_connections_200_tasks():
    async with psycopg_pool.AsyncConnectionPool(
            CONNINFO, min_size=16, max_size=16, open=False, timeout=WAIT) as pool:
        await pool.wait(timeout=WAIT)

        async def handler(i):
            async with pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT %s::int * 2, pg_backend_pid(), pg_sleep(0.002)", (i,))
                doubled, pid, _ = await cur.fetchone()
            return doubled, pid, cpu_work(i)

        results = await asyncio.gather(*(handler(i) for i in range(200)))
        stats = pool.get_stats()
    return {"all_right": [r[0] for r in results] == [2 * i for i in range(200)],
            "digests": sum(r[2] for r in results),
            "pids_at_most_16": len({r[1] for r in results}) <= 16,
            "pool_size": stats["pool_size"],
            "requests": stats["requests_num"]}


@scenario
async def psycopg_many_connections_at_once():
    async def one(i):
        async with await psycopg_connect() as conn:
            cur = await conn.execute("SELECT %s::text || '!'", (i,))
            return (await cur.fetchone())[0]

    return await asyncio.gather(*(one(i) for i in range(60)))


# --- asyncpg ----------------------------------------------------------------

@scenario
async def asyncpg_types_prepared_and_cursor():
    conn = await asyncpg_connect()
    try:
        row = await conn.fetchrow(TYPES_QUERY)
        total = await conn.fetchval("SELECT sum(g) FROM generate_series(1, 100000) g")
        rows = await conn.fetch("SELECT g, md5(g::text) FROM generate_series(1, 50000) g")
        stmt = await conn.prepare("SELECT $1::int + 1")
        prepared = [await stmt.fetchval(i) for i in range(100)]
        async with conn.transaction():
            streamed = [r[0] async for r in conn.cursor(
                "SELECT g FROM generate_series(1, 5000) g", prefetch=300)]
        return {"row": list(row.values()), "sum": total,
                "rows": [len(rows), rows[-1][1]], "prepared": sum(prepared),
                "streamed": [len(streamed), sum(streamed)]}
    finally:
        await conn.close()


@scenario
async def asyncpg_transactions_and_savepoints():
    conn = await asyncpg_connect()
    try:
        await conn.execute("CREATE TEMP TABLE t (id int PRIMARY KEY, v text)")
        async with conn.transaction():
            await conn.execute("INSERT INTO t VALUES (1, 'kept')")
            try:
                async with conn.transaction():
                    await conn.execute("INSERT INTO t VALUES (2, 'undone')")
                    raise ValueError("roll the savepoint back")
            except ValueError:
                pass
            await conn.execute("INSERT INTO t VALUES (3, 'kept too')")
        try:
            async with conn.transaction(isolation="serializable"):
                await conn.execute("INSERT INTO t VALUES (4, 'whole block undone')")
                raise KeyError("abort")
        except KeyError:
            pass
        refused = None
        try:
            async with conn.transaction(readonly=True):
                await conn.execute("CREATE TABLE refused (id int)")
        except asyncpg.PostgresError as e:
            refused = type(e).__name__
        rows = await conn.fetch("SELECT id, v FROM t ORDER BY id")
        return {"rows": [list(r) for r in rows], "readonly": refused,
                "in_transaction": conn.is_in_transaction()}
    finally:
        await conn.close()


@scenario
async def asyncpg_server_errors():
    conn = await asyncpg_connect()
    observed = []
    try:
        await conn.execute("CREATE TEMP TABLE u (id int PRIMARY KEY)")
        await conn.execute("INSERT INTO u VALUES (1)")
        for query in FAILING_QUERIES:
            try:
                await conn.execute(query)
            except asyncpg.PostgresError as e:
                observed.append([type(e).__name__, e.sqlstate])
        try:
            await conn.fetchval("SELECT $1::int", "not an int")
        except (asyncpg.DataError, TypeError) as e:
            observed.append(type(e).__name__)
        observed.append(await conn.fetchval("SELECT count(*) FROM u"))
    finally:
        await conn.close()
    return observed


@scenario
async def asyncpg_listen_notify():
    listener = await asyncpg_connect()
    sender = await asyncpg_connect()
    try:
        received = asyncio.Queue()

        def on_notify(conn, pid, channel, payload):
            received.put_nowait((channel, payload))

        await listener.add_listener("jobs", on_notify)
        for i in range(5):
            await sender.execute(f"NOTIFY jobs, 'job-{i}'")
        async with sender.transaction():
            await sender.execute("SELECT pg_notify('jobs', 'in-tx')")
        got = [await asyncio.wait_for(received.get(), WAIT) for _ in range(6)]
        await listener.remove_listener("jobs", on_notify)
        await sender.execute("NOTIFY jobs, 'after remove'")
        await listener.execute("SELECT 1")  # Any notification has arrived.
        return [got, received.qsize()]
    finally:
        await listener.close()
        await sender.close()


@scenario
async def asyncpg_copy_in_and_out():
    conn = await asyncpg_connect()
    try:
        await conn.execute("CREATE TEMP TABLE c (id int, name text, score float8)")
        await conn.copy_records_to_table(
            "c", records=[(i, f"name {i}", i / 4) for i in range(20000)])
        await conn.copy_to_table(
            "c", source=io.BytesIO(b"-1,raw block,0.5\n-2,,1.5\n"), format="csv")
        out = io.BytesIO()
        await conn.copy_from_query("SELECT id, name, score FROM c ORDER BY id",
                                   output=out, format="csv")
        lines = out.getvalue().decode().splitlines()
        chunks = []
        await conn.copy_from_table("c", output=_collect_into(chunks))
        return {"lines": len(lines), "first": lines[:3], "last": lines[-1],
                "table_bytes": sum(len(c) for c in chunks),
                "count": await conn.fetchval("SELECT count(*) FROM c")}
    finally:
        await conn.close()


def _collect_into(chunks):
    async def write(data):
        chunks.append(data)
    return write


@scenario
async def asyncpg_cancel_running_query_by_task_cancel():
    conn = await asyncpg_connect()
    watcher = await psycopg_connect(autocommit=True)
    try:
        outcome, quick = await cancel_once_active(
            watcher, "ap-cancel", conn.fetchval("SELECT pg_sleep(30) /* ap-cancel */"))
        return [outcome, quick, await conn.fetchval("SELECT 'still usable'"),
                conn.is_closed()]
    finally:
        await conn.close()
        await watcher.close()


@scenario
async def asyncpg_timeouts():
    conn = await asyncpg_connect()
    observed = []
    try:
        try:
            await conn.fetchval("SELECT pg_sleep(30)", timeout=0.3)
        except TimeoutError as e:
            observed.append(type(e).__name__)
        try:
            await asyncio.wait_for(conn.fetchval("SELECT pg_sleep(30)"), 0.3)
        except TimeoutError as e:
            observed.append(type(e).__name__)
        await conn.execute("SET statement_timeout = 200")
        try:
            await conn.execute("SELECT pg_sleep(30)")
        except asyncpg.QueryCanceledError as e:
            observed.append([type(e).__name__, e.sqlstate])
        observed.append(await conn.fetchval("SELECT 3"))
    finally:
        await conn.close()
    return observed


@scenario
async def asyncpg_executemany_and_pool_200_tasks():
    async with asyncpg.create_pool(host=HOST, port=PORT, user=USER,
                                   database=DBNAME, min_size=16,
                                   max_size=16) as pool:
        await pool.execute("CREATE TABLE IF NOT EXISTS m (id int, sq int)")
        await pool.execute("TRUNCATE m")
        await pool.executemany("INSERT INTO m VALUES ($1, $2)",
                               [(i, i * i) for i in range(1000)])

        async def handler(i):
            async with pool.acquire() as conn:
                sq = await conn.fetchval("SELECT sq FROM m WHERE id = $1", i)
                pid = await conn.fetchval("SELECT pg_backend_pid()")
            return sq, pid, cpu_work(i)

        results = await asyncio.gather(*(handler(i) for i in range(200)))
        await pool.execute("DROP TABLE m")
        return {"all_right": [r[0] for r in results] == [i * i for i in range(200)],
                "digests": sum(r[2] for r in results),
                "pids_at_most_16": len({r[1] for r in results}) <= 16,
                "size": pool.get_size()}


@scenario
async def asyncpg_many_connections_at_once():
    async def one(i):
        conn = await asyncpg_connect()
        try:
            return await conn.fetchval("SELECT $1::text || '!'", str(i))
        finally:
            await conn.close()

    return await asyncio.gather(*(one(i) for i in range(60)))


# --- a server restart mid-run (last: the server restarts) -------------------

async def restart_server():
    """pg_ctl restart -m fast, as the cluster's owner; waits for it."""
    run_as = os.environ.get("MT_PG_RUN_AS") or None
    proc = await asyncio.create_subprocess_exec(
        os.environ["MT_PG_CTL"], "-D", os.environ["MT_PG_DATA"], "-m", "fast",
        "-w", "-t", str(WAIT), "restart",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        **({"user": run_as, "group": run_as, "extra_groups": []} if run_as else {}))
    return await asyncio.wait_for(proc.wait(), WAIT + 10)


async def hammer_through_restart(query_once, allowed):
    """Eight tasks query in a loop while the server restarts. Each error
    must be one the driver documents for a lost server (`allowed`); after
    the restart, every task must get answers again. Returns what the
    tasks saw, in a form that does not depend on timing."""
    restarted = asyncio.Event()
    seen_errors = set()

    async def worker(n):
        answered_after = 0
        while answered_after < 3:
            try:
                value = await asyncio.wait_for(query_once(n), WAIT)
                assert value == n
                if restarted.is_set():
                    answered_after += 1
            except allowed as e:
                seen_errors.add(error_name(e))
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.01)
        return answered_after

    workers = [asyncio.create_task(worker(n)) for n in range(8)]
    await asyncio.sleep(0.3)
    code = await restart_server()
    restarted.set()
    answered = await asyncio.wait_for(asyncio.gather(*workers), WAIT * 2)
    return {"pg_ctl": code, "answered_after_restart": answered,
            "unexpected_errors": sorted(
                e for e in seen_errors if e.split(".")[0] not in
                ("psycopg", "psycopg_pool", "asyncpg", "builtins"))}


@scenario
async def psycopg_pool_through_server_restart():
    async with psycopg_pool.AsyncConnectionPool(
            CONNINFO, min_size=4, max_size=8, open=False, timeout=WAIT,
            check=psycopg_pool.AsyncConnectionPool.check_connection) as pool:
        await pool.wait(timeout=WAIT)
        # A connection held across the restart: its next query fails with
        # an OperationalError, and the connection is closed.
        held = await psycopg_connect(autocommit=True)

        async def query_once(n):
            async with pool.connection() as conn:
                cur = await conn.execute("SELECT %s::int", (n,))
                return (await cur.fetchone())[0]

        observed = await hammer_through_restart(
            query_once, (psycopg.OperationalError, psycopg_pool.PoolTimeout))
        try:
            await held.execute("SELECT 1")
            held_outcome = "answered"
        except psycopg.OperationalError:
            held_outcome = "OperationalError"
        observed["held_connection"] = [held_outcome, held.closed]
        await held.close()
        return observed


@scenario
async def asyncpg_pool_through_server_restart():
    async with asyncpg.create_pool(host=HOST, port=PORT, user=USER,
                                   database=DBNAME, min_size=4,
                                   max_size=8) as pool:
        held = await asyncpg_connect()

        async def query_once(n):
            return await pool.fetchval("SELECT $1::int", n)

        observed = await hammer_through_restart(
            query_once, (asyncpg.PostgresError, asyncpg.InterfaceError,
                         asyncpg.InternalClientError, ConnectionError, OSError))
        try:
            await held.fetchval("SELECT 1")
            held_outcome = "answered"
        except (asyncpg.PostgresError, asyncpg.InterfaceError,
                ConnectionError) as e:
            held_outcome = "lost"
            observed["held_error_is_documented"] = isinstance(
                e, (asyncpg.ConnectionDoesNotExistError,
                    asyncpg.AdminShutdownError, asyncpg.InterfaceError,
                    ConnectionError))
        observed["held_connection"] = [held_outcome, held.is_closed()]
        await held.close()
        return observed
