"""``import mt_asyncio.asyncio as asyncio``: asyncio's API on the parallel
loop.

Every name in stdlib ``asyncio.__all__`` is here. The loop, Future, Task,
the combinators, timeouts, TaskGroup, the synchronization primitives, the
queues and the subprocess functions are mt_asyncio's own, correct when
tasks run on several worker threads at once. Exceptions, constants,
protocol base classes and helpers that only build on the loop's API are
stdlib's own objects (so ``except asyncio.CancelledError`` catches ours
everywhere); docs/compatibility.md lists them all.
"""

import asyncio as _stdlib

# Stdlib's own objects: exceptions, constants, base classes, loop access.
# (Looked up by name: some exist only on newer Pythons, e.g. the 3.14 call
# graph classes.)
_STDLIB_OWNED = (
    "ALL_COMPLETED", "FIRST_COMPLETED", "FIRST_EXCEPTION",
    "AbstractEventLoop", "AbstractServer", "BaseEventLoop", "BaseProtocol",
    "BaseTransport", "BrokenBarrierError", "BufferedProtocol",
    "CancelledError", "DatagramProtocol", "DatagramTransport",
    "FrameCallGraphEntry", "FutureCallGraph", "IncompleteReadError",
    "InvalidStateError", "LimitOverrunError", "Protocol", "ReadTransport",
    "SelectorEventLoop", "SendfileNotAvailableError", "Server",
    "StreamReader", "StreamReaderProtocol", "StreamWriter",
    "SubprocessProtocol", "SubprocessTransport", "TimeoutError", "Transport",
    "WriteTransport", "_enter_task", "_get_running_loop", "_leave_task",
    "_register_task", "_set_running_loop", "_unregister_task",
    "get_event_loop", "get_event_loop_policy", "get_running_loop",
    "iscoroutine", "iscoroutinefunction", "isfuture", "set_event_loop",
    "set_event_loop_policy", "wrap_future",
)
for _name in _STDLIB_OWNED:
    if hasattr(_stdlib, _name):
        globals()[_name] = getattr(_stdlib, _name)

# The parallel loop and everything that must be thread-safe on it.
from ._core import Future, Handle, TimerHandle  # noqa: F401
from .base_events import EventLoop, new_event_loop  # noqa: F401
from .locks import (  # noqa: F401
    Barrier, BoundedSemaphore, Condition, Event, Lock, Semaphore,
)
from .queues import (  # noqa: F401
    LifoQueue, PriorityQueue, Queue, QueueEmpty, QueueFull, QueueShutDown,
)
from .runners import Runner, run  # noqa: F401
from .taskgroups import TaskGroup  # noqa: F401
from .tasks import (  # noqa: F401
    Task, all_tasks, as_completed, create_eager_task_factory, create_task,
    current_task, eager_task_factory, ensure_future, gather,
    run_coroutine_threadsafe, shield, sleep, wait,
)
from .threads import to_thread  # noqa: F401
from .timeouts import Timeout, timeout, timeout_at, wait_for  # noqa: F401

if hasattr(_stdlib, "capture_call_graph"):  # 3.14's call-graph introspection.
    from .graph import (  # noqa: F401
        capture_call_graph, format_call_graph, future_add_to_awaited_by,
        future_discard_from_awaited_by, print_call_graph,
    )

__all__ = list(_stdlib.__all__)

#: Which implementation backs this module.
BACKEND = "mt_asyncio"


# asyncio.subprocess: Process and create_subprocess_* on the parallel loop
# (reached as ``asyncio.subprocess`` too, as in stdlib).
from . import subprocess  # noqa: E402
from .subprocess import create_subprocess_exec, create_subprocess_shell  # noqa: E402,F401

# Anything else a given Python's asyncio exports (3.13's child watchers and
# loop policies, say) is stdlib's object.
for _name in _stdlib.__all__:
    if _name not in globals():
        globals()[_name] = getattr(_stdlib, _name)
del _name


# mt-asyncio 0.3.0a1's spelling, asyncio.compat.install(): the same module
# as mt_asyncio.compat.
from . import compat  # noqa: E402,F401


def __getattr__(name):
    # Submodules and private helpers (``asyncio.events``, ``asyncio.tasks``,
    # ...) are stdlib's.
    try:
        return getattr(_stdlib, name)
    except AttributeError:
        raise AttributeError(
            f"module {__name__!r} has no attribute {name!r}") from None
