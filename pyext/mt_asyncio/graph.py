"""Call-graph introspection (asyncio's 3.14 ``capture_call_graph`` family)
for mt_asyncio's futures and tasks.

The graph is stdlib's own data: ``FutureCallGraph`` and
``FrameCallGraphEntry`` objects, so code that formats or walks stdlib's
graphs walks ours. What a future is awaited by comes from
``future._asyncio_awaited_by`` (see pyext/src/future/awaited_by.h). A task that
is not the caller's own is described from its coroutine's await chain,
read while no worker steps it (``Task._while_not_stepped``): CPython lets no
thread read the frames of a coroutine another thread is executing. A task
that stays busy on another worker throughout a short wait is shown
without its call stack.
"""

import asyncio as _stdlib_asyncio
import sys

from . import _core
from . import tasks as _tasks

__all__ = (
    "capture_call_graph", "format_call_graph", "print_call_graph",
    "future_add_to_awaited_by", "future_discard_from_awaited_by",
)

future_add_to_awaited_by = _core.future_add_to_awaited_by
future_discard_from_awaited_by = _core.future_discard_from_awaited_by

# Pairs that are not both ours (a stdlib future, a stdlib task) are
# stdlib's business, as before.
_stdlib_futures = sys.modules["asyncio.futures"]
if hasattr(_stdlib_futures, "future_add_to_awaited_by"):
    _core._set_awaited_by_fallbacks(
        _stdlib_futures.future_add_to_awaited_by,
        _stdlib_futures.future_discard_from_awaited_by)

_FUTURE_TYPES = (_core.Future, _stdlib_asyncio.Future)
_TASK_TYPES = (_core.Task, _stdlib_asyncio.Task)


def _graph_classes():
    # Only 3.14's asyncio has them; before, nothing here is reachable from
    # mt_asyncio.asyncio (which exports what stdlib exports).
    return _stdlib_asyncio.FutureCallGraph, _stdlib_asyncio.FrameCallGraphEntry


def _check_future(future):
    if not isinstance(future, _FUTURE_TYPES):
        raise TypeError(f"{future!r} object does not appear to be compatible "
                        f"with asyncio.Future")


def _truncated(innermost_first, limit):
    """Stdlib's truncation of a call stack (listed innermost entry first):
    a positive `limit` keeps that many outermost entries, a negative one
    the innermost |limit|. (Stdlib's docstring words it the other way
    round; what it does is what users observe, on both kinds of stack.)"""
    if not limit:
        return innermost_first
    return innermost_first[-limit:] if limit > 0 else innermost_first[:-limit]


def _awaited_by_graphs(future, limit):
    waiters = future._asyncio_awaited_by
    if not waiters:
        return ()
    return tuple(_graph_of_other(waiter, limit) for waiter in waiters)


def _graph_of_other(future, limit):
    """The graph of a future that is not the caller's running task: its
    stack is read off its coroutine's chain of awaits."""
    FutureCallGraph, FrameCallGraphEntry = _graph_classes()
    _check_future(future)
    frames = []

    def walk():
        # Outermost coroutine first; each one's cr_await is the next inward.
        get_coro = getattr(future, "get_coro", None)
        awaitable = get_coro() if get_coro is not None else None
        while awaitable is not None:
            if hasattr(awaitable, "cr_await"):
                frames.append(FrameCallGraphEntry(awaitable.cr_frame))
                awaitable = awaitable.cr_await
            elif hasattr(awaitable, "ag_await"):
                frames.append(FrameCallGraphEntry(awaitable.ag_frame))
                awaitable = awaitable.ag_await
            else:
                break

    if limit == 0:
        pass
    elif isinstance(future, _core.Task):
        # Read while no worker steps the task; one that stays busy on
        # another worker is shown without its call stack.
        future._while_not_stepped(walk, None)
    else:
        walk()
    frames.reverse()  # Innermost first, as for the running task.
    frames = _truncated(frames, limit)
    return FutureCallGraph(future, tuple(frames),
                           _awaited_by_graphs(future, limit))


def _frame_at(depth):
    """What sys._getframe(depth) gives in the caller (its own frame at 0),
    or None when the stack is not that deep. A task's step on a worker starts from a native
    call, with no Python frames of a run loop beneath the coroutine as on
    stdlib's loop, so a depth sys._getframe() refuses there ("call stack is
    not deep enough") just leaves nothing to show."""
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return None
        frame = frame.f_back
    return frame


def capture_call_graph(future=None, /, *, depth=1, limit=None):
    """The async call graph of `future`, or of the current task.

    Returns a FutureCallGraph (None if there is no current task and no
    future was given). For the current task, `depth` frames are skipped
    from the top of the stack. `limit` keeps at most |limit| entries of
    every call stack: the outermost ones if positive, the innermost if
    negative, none if 0 (what stdlib does; its docstring says the
    opposite).
    """
    FutureCallGraph, FrameCallGraphEntry = _graph_classes()
    loop = _stdlib_asyncio._get_running_loop()
    if future is not None:
        if loop is None or future is not _tasks.current_task(loop):
            return _graph_of_other(future, limit)
    elif loop is None:
        raise RuntimeError(
            "capture_call_graph() is called outside of a running event loop "
            "and no *future* to introspect was provided")
    else:
        future = _tasks.current_task(loop)
        if future is None:
            return None
    _check_future(future)

    frames = []
    frame = _frame_at(depth) if limit != 0 else None
    caller = None
    try:
        # From the caller outwards, through plain calls and coroutines,
        # down to the coroutine the task steps: the first coroutine frame
        # whose caller is no coroutine (the worker, or the loop's
        # machinery) ends the task's stack.
        while frame is not None:
            frames.append(FrameCallGraphEntry(frame))
            caller = frame.f_back
            if (frame.f_generator is not None and caller is not None
                    and caller.f_generator is None):
                break
            frame = caller
    finally:
        del frame, caller  # No frame of ours kept alive by a cycle.
    frames = _truncated(frames, limit)
    return FutureCallGraph(future, tuple(frames),
                           _awaited_by_graphs(future, limit))


def _frame_line(frame):
    """'File ..., line N, in [kind ]qualname()' for one stack entry."""
    gen = frame.f_generator
    if gen is None:
        code, kind = frame.f_code, ""
    else:
        for frame_attr, code_attr, tag in (("cr_frame", "cr_code", "async "),
                                           ("ag_frame", "ag_code", "async generator "),
                                           ("gi_frame", "gi_code", "generator ")):
            if hasattr(gen, frame_attr):
                # A task on another worker may have finished since the
                # capture (its coroutine's frame is gone): keep the one
                # captured, which still knows its code and last line.
                frame, code, kind = (getattr(gen, frame_attr) or frame,
                                     getattr(gen, code_attr), tag)
                break
        else:  # Not a generator after all: AttributeError, as in stdlib.
            frame, code, kind = gen.gi_frame, gen.gi_code, "generator "
    return (f"File {frame.f_code.co_filename!r}, line {frame.f_lineno}, "
            f"in {kind}{code.co_qualname}()")


def _render(graph, lines, level):
    indent = "    " * level
    fut = graph.future
    if isinstance(fut, _TASK_TYPES):
        lines.append(f"{indent}* Task(name={fut.get_name()!r}, id={id(fut):#x})")
    else:
        lines.append(f"{indent}* Future(id={id(fut):#x})")
    if graph.call_stack:
        lines.append(f"{indent}  + Call stack:")
        for entry in graph.call_stack:
            lines.append(f"{indent}  |   {_frame_line(entry.frame)}")
    if graph.awaited_by:
        lines.append(f"{indent}  + Awaited by:")
        for parent in graph.awaited_by:
            _render(parent, lines, level + 1)


def format_call_graph(future=None, /, *, depth=1, limit=None):
    """The async call graph of `future` (or the current task) as text; ""
    when there is nothing to show."""
    graph = capture_call_graph(future, depth=depth + 1, limit=limit)
    if graph is None:
        return ""
    lines = []
    try:
        _render(graph, lines, 0)
    finally:
        del graph  # It holds frames: let them go now.
    return "\n".join(lines)


def print_call_graph(future=None, /, *, file=None, depth=1, limit=None):
    """Print the async call graph of `future` (or the current task)."""
    # `depth` unchanged, as stdlib passes it: the printed stack starts at
    # this function's own frame.
    print(format_call_graph(future, depth=depth, limit=limit), file=file)
