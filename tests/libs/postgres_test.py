"""PostgreSQL on the parallel loop: psycopg 3 (AsyncConnection,
psycopg_pool.AsyncConnectionPool) and asyncpg, unmodified, under
compat.install(), against a private server this module starts
(pg_cluster.py) and stops at its end, failed or not.

Every scenario of pg_scenarios.py runs on stdlib asyncio and on
mt_asyncio at 1 and N workers, each backend in a process of its own
(backend_child.py); each must end clean (no error, no descriptor or child
process left) and observe what stdlib observes. Needs Debian's PostgreSQL
server and the drivers from PyPI (tools/setup.sh installs them); without
them the module is skipped with the reason printed."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import backends  # noqa: E402
import pg_cluster  # noqa: E402

for module, package in (("psycopg", "psycopg"), ("psycopg_pool", "psycopg-pool"),
                        ("asyncpg", "asyncpg")):
    pytest.importorskip(module, reason=f"{package} is not installed "
                        "(tools/setup.sh installs it)")

BINDIR = pg_cluster.find_bindir()
if BINDIR is None:
    pytest.skip("no PostgreSQL server (initdb/pg_ctl): tools/setup.sh installs "
                "Debian's postgresql", allow_module_level=True)

import pg_scenarios  # noqa: E402

NAMES = list(pg_scenarios.SCENARIOS)


@pytest.fixture(scope="module")
def runs():
    cluster = pg_cluster.Cluster(BINDIR).start()
    try:
        yield backends.BackendRuns("pg_scenarios", env=cluster.env(),
                                   timeout_s=900)
    finally:
        log = cluster.log_tail()
        cluster.stop()
        print(f"\nPostgreSQL server log (last lines):\n{log}")


@pytest.mark.parametrize("backend", backends.BACKENDS)
@pytest.mark.parametrize("name", NAMES)
def test_postgres(name, backend, runs):
    runs.check(name, backend)
