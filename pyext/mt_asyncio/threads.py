"""asyncio.to_thread() on the parallel loop (stdlib's asyncio/threads.py)."""

import contextvars
import functools
from asyncio import events

__all__ = ["to_thread"]


async def to_thread(func, /, *args, **kwargs):
    """Run func(*args, **kwargs) in the loop's default executor, in a copy
    of the current context; return its result."""
    loop = events.get_running_loop()
    ctx = contextvars.copy_context()
    call = functools.partial(ctx.run, func, *args, **kwargs)
    return await loop.run_in_executor(None, call)
