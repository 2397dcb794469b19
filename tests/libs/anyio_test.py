"""anyio's asyncio backend on the parallel loop, under compat.install():
every scenario of anyio_scenarios.py (cancel scopes nested, shielded,
cancelled from another task and by deadlines; move_on_after, fail_after;
task groups; anyio's primitives, streams, threads, sockets and processes)
on stdlib asyncio and on mt_asyncio at 1 and N workers, each backend in a
process of its own (anyio binds asyncio's names when it is imported). Each
must end clean and observe what stdlib observes. anyio comes from PyPI
(tools/setup.sh); without it the module is skipped with the reason."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import backends  # noqa: E402

pytest.importorskip("anyio", reason="anyio is not installed (tools/setup.sh installs it)")

import anyio_scenarios  # noqa: E402

NAMES = list(anyio_scenarios.SCENARIOS)
RUNS = backends.BackendRuns("anyio_scenarios", timeout_s=600)


@pytest.mark.parametrize("backend", backends.BACKENDS)
@pytest.mark.parametrize("name", NAMES)
def test_anyio(name, backend):
    RUNS.check(name, backend)
