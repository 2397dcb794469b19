"""pytest's entry point for one run of an upstream suite (runner.py).

pytest_child is imported first, before pytest loads the project's
configuration and plugins: on mt_asyncio it starts the runtime and calls
compat.install() at the very start of the program, as a service does, so
that a library binding asyncio's names at import (anyio's plugin, loaded
by the project's own ``-p anyio``, does ``from asyncio import all_tasks``)
binds ours.
"""

import sys

import pytest_child  # noqa: E402  (first: see above)
import pytest

if __name__ == "__main__":
    sys.exit(pytest.main(sys.argv[1:], plugins=[pytest_child]))
