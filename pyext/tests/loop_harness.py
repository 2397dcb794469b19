"""What the loop-level tests share: the runtime they run on (4 workers),
a fresh EventLoop per test, and run() with a bound on every wait."""

import pytest

import mt_asyncio
import mt_asyncio.asyncio as asyncio
from mt_asyncio.base_events import EventLoop

WAIT = 10  # Seconds; every wait in these tests is bounded.


@pytest.fixture(scope="module", autouse=True)
def runtime():
    mt_asyncio.start_runtime(4)
    yield
    mt_asyncio.shutdown_runtime()


@pytest.fixture
def loop():
    loop = EventLoop()
    yield loop
    loop.close()


def run(loop, coro, timeout=WAIT):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))
