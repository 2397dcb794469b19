"""The loop and task half of the admin boundary, and Python's view of it.

The core answers the runtime's own admin methods in C++ (no interpreter
needed); the methods about event loops and tasks need Python objects, and
land here: ``_core`` calls :func:`_handle` on the calling thread (a control
plane thread, attached for the call). Every answer is a JSON document
shaped like the ``mt.control.v1`` message of the same name, so the control
service parses it into the message and Python reads the same document.

Task frames are read only while no worker steps the task
(``Task._while_not_stepped``): CPython lets no second thread read the frames
of a coroutine that is executing.
"""

import asyncio as _stdlib_asyncio
import itertools
import json
import os
import re
import sys
import threading
import weakref

from . import _core

__all__ = ["call", "runtime_info", "register_loop"]

# Codes of the admin boundary (gRPC's canonical codes).
_OK = 0
_INVALID_ARGUMENT = 3
_NOT_FOUND = 5
_FAILED_PRECONDITION = 9

# Bounds that keep one answer well under gRPC's default 4 MiB message
# limit: a task entry is at most ~1.5 KiB with these caps.
_DEFAULT_PAGE_SIZE = 500
_MAX_PAGE_SIZE = 2000
_MAX_TEXT = 300
_DEFAULT_FRAMES = 64
_MAX_FRAMES = 1000
_MAX_GRAPH_CHARS = 256 * 1024

_TASK_STATES = {"running": "TASK_STATE_RUNNING", "ready": "TASK_STATE_READY",
                "waiting": "TASK_STATE_WAITING"}


def call(method, **request):
    """One admin method through the core, as a dict; errors raise
    (ValueError: bad argument, LookupError: not found, RuntimeError:
    anything else)."""
    code, body = _core._admin_call(method, json.dumps(request))
    if code == _OK:
        return json.loads(body)
    message = body.decode("utf-8", "replace")
    if code == _INVALID_ARGUMENT:
        raise ValueError(message)
    if code == _NOT_FOUND:
        raise LookupError(message)
    raise RuntimeError(message)


def _short_enum(value, prefix):
    return value[len(prefix):].lower() if value.startswith(prefix) else value


def runtime_info():
    """GetRuntime as a dict, enum values shortened ("running")."""
    info = call("GetRuntime")
    info["state"] = _short_enum(info["state"], "RUNTIME_STATE_")
    for worker in info["workers"]:
        worker["state"] = _short_enum(worker["state"], "WORKER_STATE_")
    return info


# --- the registry of loops ----------------------------------------------------

_registry_lock = threading.Lock()
_loops = weakref.WeakValueDictionary()  # loop id -> loop
_next_loop_id = itertools.count(1)


def register_loop(loop):
    """Called by every mt_asyncio loop when it is made: ListLoops sees
    every loop alive in the process."""
    with _registry_lock:
        loop_id = next(_next_loop_id)
        _loops[loop_id] = loop
    loop._mt_loop_id = loop_id


def _live_loops():
    with _registry_lock:
        return sorted(_loops.items())


# --- answers ----------------------------------------------------------------------


# Lone surrogates: a str may hold them (a task named from undecoded bytes,
# say), UTF-8 cannot, and one in a page would fail the whole answer.
_UNENCODABLE = re.compile("[\ud800-\udfff]")


def _text(value, limit=_MAX_TEXT):
    """A string the process gave us, made safe to answer once, here at the
    source: any object turned to str (a repr that raises gives its type),
    code points UTF-8 cannot carry replaced by U+FFFD, clipped to limit
    code points. Control characters are kept: they are data, and making
    them harmless on a terminal is the printer's job."""
    if not isinstance(value, str):
        try:
            value = str(value)
        except Exception:
            value = f"<unprintable {type(value).__qualname__}>"
    value = _UNENCODABLE.sub("\ufffd", value)
    return value if len(value) <= limit else value[:limit - 3] + "..."


def _loop_state(loop):
    if loop.is_closed():
        return "LOOP_STATE_CLOSED"
    return "LOOP_STATE_RUNNING" if loop.is_running() else "LOOP_STATE_STOPPED"


def _loop_info(loop_id, loop, by_state=True):
    created, slow_steps, pending, running, ready, waiting = loop._mt_counts(by_state)
    counts = {"pending": pending, "running": running, "ready": ready, "waiting": waiting}
    cls = type(loop)
    return {
        "id": loop_id,
        "state": _loop_state(loop),
        "debug": loop.get_debug(),
        "deferred_callbacks": loop._deferred_count(),
        "tasks": counts,
        "tasks_created": created,
        "slow_steps": slow_steps,
        "slow_callback_duration_seconds": float(loop.slow_callback_duration),
        "thread_id": getattr(loop, "_native_thread_id", 0) or 0,
        "type": _text(f"{cls.__module__}.{cls.__qualname__}"),
    }


# Frames in these folders are the machinery (asyncio.sleep, Queue.get...):
# where a task waits is the innermost frame of the user's own code.
_MACHINERY = tuple(os.path.dirname(m.__file__) + os.sep
                   for m in (_stdlib_asyncio, sys.modules[__package__]))


def _location(task):
    """file:line where the task is suspended: the innermost frame of its
    await chain outside asyncio's and mt_asyncio's own code (else the
    innermost). "" when a worker is stepping it or it has no coroutine."""
    where = []

    def walk():
        awaitable = task.get_coro()
        frames = []
        while awaitable is not None:
            frame = getattr(awaitable, "cr_frame", None) or getattr(awaitable, "ag_frame", None)
            if frame is None:
                break
            frames.append((frame.f_code.co_filename, frame.f_lineno))
            awaitable = getattr(awaitable, "cr_await", None) or getattr(awaitable, "ag_await", None)
        own = [f for f in frames if not f[0].startswith(_MACHINERY)]
        if frames:
            where.append("%s:%s" % (own or frames)[-1])

    task._while_not_stepped(walk, None)
    return where[0] if where else ""


def _coroutine_name(task):
    coro = task.get_coro()
    if coro is None:
        return ""
    return getattr(coro, "__qualname__", None) or type(coro).__qualname__


def _describe_waiter(waiter):
    """What a task awaits, in a few words: a future's repr lists its
    callbacks (the task itself, its awaiters...), which says nothing new."""
    if waiter is None:
        return ""
    get_name = getattr(waiter, "get_name", None)
    if get_name is not None:
        return f"Task {get_name()!r}"
    state = "done" if waiter.done() else "pending"
    return f"{type(waiter).__name__} {state}"


def _task_info(task, loop_id, stats, detail=True):
    task_id, state, steps, busy_ns, age, last_worker, self_wakes = stats
    waiter = task._fut_waiter
    info = {
        "id": task_id,
        "name": _text(task.get_name()),
        "loop_id": loop_id,
        "state": _TASK_STATES.get(state, "TASK_STATE_UNSPECIFIED"),
        "coroutine": _text(_coroutine_name(task)),
        "age_seconds": age,
        "steps": steps,
        "last_worker": last_worker,
        "busy_ns": busy_ns,
        "awaiting": _text(_describe_waiter(waiter)),
        "cancelling": task.cancelling(),
        "self_wakes": self_wakes,
    }
    if detail:
        info["location"] = _text(_location(task))
    return info


def _all_tasks():
    """(loop id, task, stats) of every pending task of every live loop."""
    out = []
    for loop_id, loop in _live_loops():
        for task in loop._all_tasks():
            stats = task._mt_stats()
            if stats is not None and stats[1] != "done":
                out.append((loop_id, task, stats))
    return out


def _find_task(task_id):
    for loop_id, task, stats in _all_tasks():
        if stats[0] == task_id:
            return loop_id, task, stats
    raise LookupError(f"no pending task with id {task_id}")


def _int_field(request, key, default=0, lo=0, hi=2**64 - 1):
    value = request.get(key, default)
    if isinstance(value, str):  # proto3 JSON writes 64-bit integers as strings.
        try:
            value = int(value)
        except ValueError:
            raise ValueError(f"{key} must be an integer, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{key} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def _list_loops(request):
    by_state = not request.get("skip_task_states", False)
    return {"loops": [_loop_info(loop_id, loop, by_state) for loop_id, loop in _live_loops()]}


def _list_tasks(request):
    loop_id = _int_field(request, "loop_id")
    state = request.get("state", "TASK_STATE_UNSPECIFIED")
    if state not in ("TASK_STATE_UNSPECIFIED", *_TASK_STATES.values()):
        raise ValueError(f"unknown task state {state!r}")
    name_contains = request.get("name_contains", "")
    if not isinstance(name_contains, str):
        raise ValueError("name_contains must be a string")
    page_size = _int_field(request, "page_size", 0, 0, _MAX_PAGE_SIZE) or _DEFAULT_PAGE_SIZE
    token = request.get("page_token", "")
    after = 0
    if token:
        try:
            after = int(token)
        except (TypeError, ValueError):
            raise ValueError(f"invalid page_token {token!r}") from None
    matching = []
    for lid, task, stats in _all_tasks():
        if loop_id and lid != loop_id:
            continue
        if state != "TASK_STATE_UNSPECIFIED" and _TASK_STATES.get(stats[1]) != state:
            continue
        if name_contains and name_contains not in task.get_name():
            continue
        matching.append((stats[0], lid, task, stats))
    matching.sort(key=lambda entry: entry[0])
    page = [entry for entry in matching if entry[0] > after][:page_size]
    more = page and page[-1][0] < matching[-1][0]
    # Encoded one task at a time: a page of 2,000 tasks held as dicts
    # until one json.dumps took several MiB more at its peak, and the
    # allocator keeps what a peak took.
    tasks = ",".join(json.dumps(_task_info(task, lid, stats)) for _, lid, task, stats in page)
    tail = json.dumps({"next_page_token": str(page[-1][0]) if more else "",
                       "total_matching": len(matching)})
    return '{"tasks":[' + tasks + "]," + tail[1:]


def _frame_info(frame):
    code = frame.f_code
    return {"function": _text(code.co_qualname), "file": _text(code.co_filename),
            "line": frame.f_lineno or 0}


def _get_task(request):
    task_id = _int_field(request, "id", 0, 1)
    max_frames = _int_field(request, "max_frames", 0, 0, _MAX_FRAMES) or _DEFAULT_FRAMES
    loop_id, task, stats = _find_task(task_id)
    stack = [_frame_info(f) for f in task.get_stack(limit=max_frames)]
    call_graph = ""
    if sys.version_info >= (3, 14):  # asyncio's call-graph API is 3.14's.
        from . import graph
        call_graph = _text(graph.format_call_graph(task, limit=max_frames),
                           _MAX_GRAPH_CHARS)
    awaited_by = []
    for waiter in getattr(task, "_asyncio_awaited_by", None) or ():
        waiter_stats = getattr(waiter, "_mt_stats", None)
        if waiter_stats is not None and waiter_stats() is not None:
            awaited_by.append(waiter_stats()[0])
    return {"task": _task_info(task, loop_id, stats), "stack": stack,
            "call_graph": call_graph, "awaited_by": sorted(awaited_by)}


def _cancel_task(request):
    task_id = _int_field(request, "id", 0, 1)
    msg = request.get("msg", "")
    if not isinstance(msg, str):
        raise ValueError("msg must be a string")
    _, task, _ = _find_task(task_id)
    # Tasks of the parallel loop take cancel() from any thread.
    return {"cancelled": task.cancel(msg or None)}


def _task_names(request):
    ids = request.get("ids", "")
    if not isinstance(ids, str):
        raise ValueError("ids must be a comma-separated string")
    try:
        wanted = {int(part) for part in ids.split(",") if part}
    except ValueError:
        raise ValueError(f"invalid ids {ids!r}") from None
    names = {}
    if wanted:
        for _, task, stats in _all_tasks():
            if stats[0] in wanted:
                names[str(stats[0])] = _text(task.get_name())
    return {"names": names}


_METHODS = {
    "ListLoops": _list_loops,
    "ListTasks": _list_tasks,
    "GetTask": _get_task,
    "CancelTask": _cancel_task,
    "TaskNames": _task_names,
}


def register_method(name, handler):
    """Answer admin method `name` with handler(request dict) -> dict or
    str: for modules above this one (mt_asyncio.metrics' GetMetrics)."""
    _METHODS[name] = handler


def _handle(method, request_json):
    handler = _METHODS.get(method)
    if handler is None:
        raise NotImplementedError(f"unknown admin method {method!r}")
    try:
        request = json.loads(request_json) if request_json else {}
    except ValueError as exc:
        raise ValueError(f"malformed request: {exc}") from None
    if not isinstance(request, dict):
        raise ValueError("the request must be a JSON object")
    answer = handler(request)
    return answer if isinstance(answer, str) else json.dumps(answer)


_core._set_admin_handler(_handle)
