"""compat.install() / compat.uninstall(): point stdlib ``asyncio`` at
mt_asyncio, process-wide and reversibly.

After install(), a library that does ``import asyncio`` gets mt_asyncio's
thread-safe primitives, queues, combinators, timeouts, TaskGroup and
``create_subprocess_exec``/``create_subprocess_shell``, and
``asyncio.run()`` / ``asyncio.new_event_loop()`` create the parallel loop.
Names are rebound both in ``asyncio`` and in the submodule that defines
them (``asyncio.locks.Lock``, ``asyncio.tasks.gather``, ...), because
libraries reach for either. Future and Task stay stdlib's in the
submodules that stdlib loops use to build them, so a stdlib loop created
explicitly keeps working.
"""

import asyncio
import importlib
import sys
import threading

from . import (
    _core, base_events, locks, queues, runners, subprocess, taskgroups, tasks,
    threads, timeouts,
)

__all__ = ["install", "uninstall", "installed", "serial_tasks"]

# (stdlib module, the mt_asyncio module defining the replacements, names):
# each attribute is replaced by our object of the same name.
_TARGETS = [
    ("asyncio.locks", locks, ("Lock", "Event", "Condition", "Semaphore",
                              "BoundedSemaphore", "Barrier")),
    ("asyncio.queues", queues, ("Queue", "LifoQueue", "PriorityQueue")),
    ("asyncio.tasks", tasks, ("gather", "wait", "shield", "as_completed",
                              "create_task", "ensure_future", "current_task",
                              "all_tasks", "run_coroutine_threadsafe",
                              "eager_task_factory", "create_eager_task_factory")),
    ("asyncio.tasks", timeouts, ("wait_for",)),
    ("asyncio.timeouts", timeouts, ("timeout", "timeout_at", "Timeout")),
    ("asyncio.taskgroups", taskgroups, ("TaskGroup",)),
    ("asyncio.runners", runners, ("run", "Runner")),
    ("asyncio.events", base_events, ("new_event_loop",)),
    ("asyncio.threads", threads, ("to_thread",)),
    ("asyncio.subprocess", subprocess, ("create_subprocess_exec",
                                        "create_subprocess_shell")),
]
if sys.version_info >= (3, 14):
    # Call-graph introspection: stdlib's versions refuse our futures.
    from . import graph
    _TARGETS += [
        ("asyncio.graph", graph, ("capture_call_graph", "format_call_graph",
                                  "print_call_graph")),
        ("asyncio.futures", graph, ("future_add_to_awaited_by",
                                    "future_discard_from_awaited_by")),
    ]
# The top-level package re-exports all of the above, plus these.
_TOP_LEVEL_ONLY = [(_core, "Future"), (tasks, "Task"), (base_events, "EventLoop"),
                   (tasks, "sleep")]


def _new_event_loop():
    """asyncio.new_event_loop() under compat: our loop, unless a custom
    event loop policy is in force — then its new_event_loop(), as stdlib
    calls it."""
    return runners._new_default_loop()


# Names whose compat replacement is not mt_asyncio.asyncio's object.
_REPLACEMENTS = {"new_event_loop": _new_event_loop}

_lock = threading.Lock()
_saved = None  # {(module name, attribute): original}
_serial_tasks = False


def _pairs():
    """(stdlib module name, attribute, our object) for every replacement."""
    for module_name, ours, names in _TARGETS:
        for name in names:
            obj = _REPLACEMENTS.get(name) or getattr(ours, name)
            yield module_name, name, obj
            yield "asyncio", name, obj
    for ours, name in _TOP_LEVEL_ONLY:
        yield "asyncio", name, getattr(ours, name)


def install(*, serial_tasks=True):
    """Rebind stdlib asyncio's names to mt_asyncio's. Idempotent.

    With serial_tasks (the default), asyncio.run() and Runner.run() start
    their main task on a strand that every task it starts shares: the
    program's own tasks step one at a time, as on stdlib's loop, so objects
    libraries share between tasks without locks (an HTTP client's pool of
    connections, a server's registry of them) stay consistent. What runs in
    parallel is what network I/O makes independent: each connection's
    callbacks and the tasks they start (a server's request handlers), on
    strands of their own. serial_tasks=False keeps every task parallel, as
    mt_asyncio is without compat (shared state then needs locks)."""
    global _saved, _serial_tasks
    with _lock:
        _serial_tasks = bool(serial_tasks)
        if _saved is not None:
            return
        saved = {}
        for module_name, name, obj in _pairs():
            module = importlib.import_module(module_name)
            if (module_name, name) in saved:
                continue
            saved[(module_name, name)] = getattr(module, name)
            setattr(module, name, obj)
        _saved = saved


def uninstall():
    """Put every name install() replaced back. Idempotent."""
    global _saved
    with _lock:
        if _saved is None:
            return
        for (module_name, name), original in _saved.items():
            setattr(importlib.import_module(module_name), name, original)
        _saved = None


def installed():
    """True between install() and uninstall()."""
    return _saved is not None


def serial_tasks():
    """Whether run()'s main task and its descendants share one strand
    (install(serial_tasks=True), while installed)."""
    return _saved is not None and _serial_tasks
