"""``import mt_asyncio.asyncio as asyncio``: asyncio's API on mt_asyncio.

Status: until the parallel loop exists, this module forwards every name to
the standard library's ``asyncio``: code written against it runs today, on
one thread, with stdlib semantics. The names stay the same when the loop
moves onto the runtime's workers.
"""

import asyncio as _stdlib_asyncio
from asyncio import *  # noqa: F401,F403

__all__ = list(_stdlib_asyncio.__all__)

#: Which implementation backs this module: "stdlib" until the parallel
#: loop lands, then "mt_asyncio".
BACKEND = "stdlib"


def __getattr__(name):
    # Submodules and private helpers that ``import *`` does not bring along
    # (``asyncio.events``, ``asyncio.tasks``, ...).
    try:
        return getattr(_stdlib_asyncio, name)
    except AttributeError:
        raise AttributeError(
            f"module {__name__!r} has no attribute {name!r}") from None
