"""What ``mtctl doctor`` asks: the Diagnose admin method, and the record of
long steps it reports.

Five questions, answered from the live process (docs/diagnostics.md):

* **Lost wakeups**: a task waits on a future nothing but the task itself
  references (``await loop.create_future()`` with the future handed to
  nobody, ``await Event().wait()`` on a local event). The answer walks up
  the future's referrers (``gc.get_referrers``, weak references included)
  a few levels; a path that reaches another pending task, a global, a
  loop, a scheduled callback, a transport or protocol, or goes on past
  the last level means the future can still be completed. Only what every
  path proves dead is reported, only for plain futures, and only for a
  task that waited on the same future at both ends of the spin window.
* **Long steps**: the runtime's stall detector (a step holding its worker
  past the stall threshold, 100 ms by default) queues a report; a thread
  of this module reads the worker's stack while the step still runs
  (``_remote_debugging`` on 3.14, which reads frames without racing the
  thread that runs them; ``sys._current_frames()`` on a GIL build). The
  last ``MAX_LONG_STEPS`` are kept.
* **Spinning**: the tasks are sampled twice, ``spin_window`` apart; a task
  whose steps in between nearly all ended in a bare yield
  (``asyncio.sleep(0)``), at least ``SPIN_MIN_RATE`` a second, wakes
  itself in a loop.
* **Primitives**: for each waiting task, the Lock, Semaphore, Condition,
  Event, Barrier or Queue whose waiter queue holds its future (the first
  referrers of the future), and the task holding a Lock (the lock records
  the task that took it).
* **Deadlocks**: cycles in the wait-for graph (a task waiting on a lock
  points at the lock's holder, a task awaiting a task at that task).

Nothing here runs unless asked, except the capture of a long step's
stack, which happens only when a step already held its worker past the
threshold, at most ``MAX_CAPTURES_PER_SECOND`` times a second.
"""

import asyncio as _stdlib_asyncio
import collections
import gc
import os
import sys
import threading
import time
import types
import weakref

from . import _admin
from . import _core

__all__ = ["long_steps"]

MAX_LONG_STEPS = 64
MAX_CAPTURES_PER_SECOND = 4
MAX_FRAMES = 64
DEFAULT_SPIN_WINDOW = 0.2
MAX_SPIN_WINDOW = 5.0
SPIN_MIN_RATE = 100.0      # Self-wakes a second.
SPIN_MIN_SHARE = 0.9       # Of the task's steps in the window.
REFERRER_DEPTH = 4
MAX_WALKED = 500           # Futures walked up per call (see _next_window).
MAX_FINDINGS = 200

# --- long steps ---------------------------------------------------------------

_long_steps = collections.deque(maxlen=MAX_LONG_STEPS)
_recorded = 0
_dropped = 0
_capture_lock = threading.Lock()
_capture_pid = None

try:  # 3.14: reads a thread's frames the way an outside debugger would.
    import _remote_debugging
except ImportError:
    _remote_debugging = None

_FREE_THREADED = not getattr(sys, "_is_gil_enabled", lambda: True)()


def stacks_supported():
    """Whether a long step's stack can be read on this interpreter."""
    return _remote_debugging is not None or not _FREE_THREADED


def _stack_via_remote_debugging(native_tid):
    unwinder = _remote_debugging.RemoteUnwinder(os.getpid(), all_threads=True)
    for entry in unwinder.get_stack_trace():
        # Threads, or (later versions) interpreters holding threads.
        for thread in getattr(entry, "threads", None) or (entry,):
            if thread.thread_id == native_tid:
                # Innermost first there; innermost last here, as in tracebacks.
                return [(f.funcname, f.filename, f.lineno or 0)
                        for f in reversed(thread.frame_info[:MAX_FRAMES])]
    return None


def _stack_via_current_frames(ident):
    # GIL builds only: while this thread holds the GIL the worker does not
    # run Python, and the walk below releases it nowhere.
    frame = sys._current_frames().get(ident)
    frames = []
    while frame is not None and len(frames) < MAX_FRAMES:
        code = frame.f_code
        frames.append((code.co_qualname, code.co_filename, frame.f_lineno or 0))
        frame = frame.f_back
    frames.reverse()
    return frames or None


def _read_stack(ident, native_tid):
    if _remote_debugging is not None:
        return _stack_via_remote_debugging(native_tid)
    if not _FREE_THREADED:
        return _stack_via_current_frames(ident)
    return None


def _capture_long_steps():
    global _recorded, _dropped
    last_capture = 0.0
    while _capture_pid == os.getpid():
        report = _core._stall_wait(1.0)
        if report is None:
            continue
        worker, unit_id, running_ns, units_run, ident, native_tid, dropped = report
        stack, note = None, ""
        now = time.monotonic()
        if not stacks_supported():
            note = "this interpreter cannot read another thread's stack"
        elif now - last_capture < 1.0 / MAX_CAPTURES_PER_SECOND:
            note = "not read: long steps came faster than stacks are read"
        else:
            last_capture = now
            try:
                stack = _read_stack(ident, native_tid)
            except Exception as exc:  # The unwinder races a live process.
                note = f"could not be read: {exc!r}"[:200]
            # Read while the step still ran, or it is another step's.
            if _core._worker_units_run(worker) != units_run:
                stack, note = None, "the step ended before its stack was read"
            elif stack is None and not note:
                note = "the worker's thread had no Python frames"
        _long_steps.append({
            "at": time.time(),
            "worker": worker,
            "task_id": unit_id,
            "running_seconds": running_ns / 1e9,
            "stack": stack or [],
            "note": note,
        })
        _recorded += 1
        _dropped = dropped


def _start_capture():
    """Starts the thread that reads long steps' stacks (once a process)."""
    global _capture_pid
    with _capture_lock:
        if _capture_pid == os.getpid():
            return
        _capture_pid = os.getpid()
        thread = threading.Thread(target=_capture_long_steps, name="mt-diagnose", daemon=True)
        thread.start()


def long_steps():
    """The long steps recorded, oldest first: dicts with ``at`` (Unix
    time), ``worker``, ``task_id``, ``running_seconds`` (how long the step
    had run when seen), ``stack`` ((function, file, line) tuples, innermost
    last) and ``note`` (why there is no stack)."""
    return list(_long_steps)


# --- what tasks wait on -----------------------------------------------------------------

def _primitive_types():
    from . import locks, queues
    ours = (locks.Lock, locks.Semaphore, locks.Condition, locks.Event, locks.Barrier,
            queues.Queue)
    stdlib = (_stdlib_asyncio.Lock, _stdlib_asyncio.Semaphore, _stdlib_asyncio.Condition,
              _stdlib_asyncio.Event, _stdlib_asyncio.Barrier, _stdlib_asyncio.Queue)
    return ours + stdlib


def _primitive_kind(obj):
    for cls in type(obj).__mro__:
        if cls.__name__ in ("BoundedSemaphore", "Semaphore", "Lock", "Condition", "Event",
                            "Barrier", "PriorityQueue", "LifoQueue", "Queue"):
            return cls.__name__
    return type(obj).__name__


def _await_chain(task):
    """The task's coroutine and everything it awaits through (coroutines,
    generators, the innermost awaiter), read while no worker steps it."""
    chain = []

    def walk():
        awaitable = task.get_coro()
        while awaitable is not None and len(chain) < 1000:
            chain.append(awaitable)
            frame = getattr(awaitable, "cr_frame", None) or getattr(awaitable, "gi_frame", None) \
                or getattr(awaitable, "ag_frame", None)
            if frame is not None:
                chain.append(frame)
            awaitable = (getattr(awaitable, "cr_await", None)
                         or getattr(awaitable, "gi_yieldfrom", None)
                         or getattr(awaitable, "ag_await", None))

    task._while_not_stepped(walk, None)
    return chain


def _scan(frontier, bookkeeping):
    """One level of the walk up: {node id: {referrer id: referrer}} for
    each node of `frontier` (id -> object), leaving out the walk's own
    containers. A weak reference counts as a referrer (a protocol reaches
    its StreamReader through one)."""
    nodes = tuple(frontier.values())
    referrers = gc.get_referrers(*nodes)
    skip = bookkeeping | {id(nodes), id(referrers), id(frontier)}
    parents = collections.defaultdict(dict)
    for referrer in referrers:
        rid = id(referrer)
        if rid in skip:
            continue
        for child in gc.get_referents(referrer):
            if id(child) in frontier:
                parents[id(child)][rid] = referrer
    for nid, node in frontier.items():
        try:
            refs = weakref.getweakrefs(node)
        except TypeError:
            continue
        for ref in refs:
            parents[nid][id(ref)] = ref
    return parents


def _root_types():
    """Referrers that mean a future can still be completed: a global or a
    class, another thread's running frame, a loop, a scheduled callback,
    a transport or protocol (I/O completes it), a thread's future."""
    import concurrent.futures
    return (types.ModuleType, type, types.FrameType, _stdlib_asyncio.AbstractEventLoop,
            _stdlib_asyncio.Handle, _core.Handle, _core.TimerHandle,
            _stdlib_asyncio.BaseTransport, _stdlib_asyncio.BaseProtocol,
            concurrent.futures.Future, threading.Thread)


def _walk_up(waits, chains, bookkeeping=()):
    """waits: {future id: (task, future)}; chains: {future id: its task's
    _await_chain}. Returns (ids of the futures nothing outside their task
    can complete, {future id: the primitive whose waiter queue holds
    it}). `bookkeeping`: the caller's containers that hold the futures.

    A future is held when a path up its referrers reaches a root
    (_root_types), another pending task or its objects, or goes on past
    REFERRER_DEPTH levels. Only a future all of whose paths end inside its
    own task (the task, the coroutines it awaits through, their frames)
    within those levels is lost."""
    owner = {}  # id of a task or of an object of its await chain -> task id
    for fid, (task, _) in waits.items():
        owner[id(task)] = id(task)
        for obj in chains[fid]:
            owner[id(obj)] = id(task)
    task_of = {fid: id(pair[0]) for fid, pair in waits.items()}
    kinds = _primitive_types()
    roots = _root_types()
    primitives = {}
    mine = {id(obj) for obj in bookkeeping}
    mine.update(id(pair) for pair in waits.values())
    mine.update((id(waits), id(owner), id(task_of), id(primitives)))
    frontier = {fid: pair[1] for fid, pair in waits.items()}
    leads = {fid: {fid} for fid in frontier}  # node id -> futures it holds up
    held, seen = set(), set(frontier)
    mine.update((id(leads), id(held), id(seen)))
    for depth in range(REFERRER_DEPTH):
        parents = _scan(frontier, mine)
        following = {}
        for nid in frontier:
            futures = leads[nid] - held
            for rid, referrer in parents.get(nid, {}).items():
                if not futures:
                    break
                if rid in owner:
                    # Its own task's objects do not count; another
                    # pending task's do.
                    held.update(f for f in futures if task_of[f] != owner[rid])
                    continue
                if depth <= 1 and isinstance(referrer, kinds):
                    for fid in futures:
                        primitives.setdefault(fid, referrer)
                if rid in seen or isinstance(referrer, roots) or _is_task(referrer) \
                        or isinstance(referrer, _stdlib_asyncio.Task):
                    # A root, another task; or a node met before (a cycle,
                    # or paths joining): held.
                    held |= futures
                    continue
                seen.add(rid)
                leads[rid] = set(futures)
                following[rid] = referrer
        del parents
        frontier = following
        mine.add(id(frontier))
        if not frontier:
            break
    else:
        for nid in frontier:  # Paths still open: assume they lead out.
            held |= leads[nid]
    return set(waits) - held, primitives


# --- the diagnosis ----------------------------------------------------------------

def _sample():
    """{task id: (loop id, task, stats, the future it waits on or None)}."""
    out = {}
    for loop_id, task, stats in _admin._all_tasks():
        out[stats[0]] = (loop_id, task, stats, task._fut_waiter)
    return out


def _waits_on_futures(before, after):
    """{future id: (task, future)} for the tasks that waited on the same
    pending future (not a task) in both samples."""
    waits = {}
    for task_id, (_, task, stats, fut) in after.items():
        earlier = before.get(task_id)
        if fut is None or earlier is None or earlier[3] is not fut or stats[1] != "waiting":
            continue
        # Plain futures only: a task runs on its own, and what completes a
        # subclass (gather's) is that subclass's own machinery.
        if type(fut) not in (_core.Future, _stdlib_asyncio.Future) or fut.done():
            continue
        waits[id(fut)] = (task, fut)
    return waits


def _is_task(obj):
    return getattr(obj, "_mt_stats", None) is not None


def _frames(stack):
    return [{"function": _admin._text(fn), "file": _admin._text(file), "line": line}
            for fn, file, line in stack]


def _waiter_role(primitive, fut):
    for name, role in (("_getters", "get"), ("_putters", "put")):
        if any(f is fut for f in getattr(primitive, name, ()) or ()):
            return role
    kind = _primitive_kind(primitive)
    return "wait" if kind in ("Event", "Condition", "Barrier") else "acquire"


def _lock_of(primitive):
    """The Lock whose holder a primitive's waiters wait for, or None."""
    kind = _primitive_kind(primitive)
    if kind == "Lock":
        return primitive
    if kind == "Condition":
        return getattr(primitive, "_lock", None)
    return None


def _holder(primitive):
    lock = _lock_of(primitive)
    if lock is None:
        return 0
    return getattr(lock, "_owner_task", 0) or 0


def _cycles(edges):
    """Elementary cycles of the wait-for graph {task: [(next task, why)]},
    each once (from its smallest task id). Tasks wait on one thing at a
    time, so each has at most one edge: following them finds every cycle."""
    cycles, done = [], set()
    for start in sorted(edges):
        path, index = [], {}
        node = start
        while node in edges and node not in done and node not in index:
            index[node] = len(path)
            nxt, why = edges[node][0]
            path.append((node, nxt, why))
            node = nxt
        if node in index:
            cycle = path[index[node]:]
            first = min(range(len(cycle)), key=lambda i: cycle[i][0])
            cycles.append(cycle[first:] + cycle[:first])
        done.update(index)
    return cycles


def _number(request, key, default, hi):
    value = request.get(key, 0) or 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= hi:
        raise ValueError(f"{key} must be a number of seconds from 0 to {hi:g}")
    return float(value) or default


def _diagnose(request):
    window = _number(request, "spin_window_seconds", DEFAULT_SPIN_WINDOW, MAX_SPIN_WINDOW)
    min_step = _number(request, "min_step_seconds", 0.0, 86400)
    before = _sample()
    time.sleep(window)
    after = _sample()
    findings = []
    names = {tid: entry[1].get_name() for tid, entry in after.items()}

    waits_on = {}  # task id -> the primitive it waits on, described

    def info(task_id, detail=False):
        loop_id, task, stats, _ = after[task_id]
        entry = _admin._task_info(task, loop_id, stats, detail)
        if task_id in waits_on:
            entry["waits_on"] = waits_on[task_id]
        return entry

    def label(task_id):
        name = names.get(task_id)
        return f"task {task_id} {name!r}" if name is not None else f"task {task_id}"

    # Long steps, oldest first.
    for step in long_steps():
        if step["running_seconds"] < min_step:
            continue
        task_id = step["task_id"]
        findings.append({
            "kind": "FINDING_KIND_LONG_STEP",
            "summary": _admin._text(
                f"{label(task_id)} held worker {step['worker']} for at least "
                f"{step['running_seconds'] * 1e3:.0f} ms in one step "
                f"({time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(step['at']))} UTC)", 1000),
            "tasks": [info(task_id)] if task_id in after else [],
            "stack": _frames(step["stack"]),
            "stack_note": step["note"],
            "duration_seconds": step["running_seconds"],
            "at_unix_seconds": step["at"],
            "worker": step["worker"],
            "task_id": task_id,
        })

    # Spinning: nearly every step in the window ended in a bare yield.
    for task_id, (_, task, stats, _) in after.items():
        earlier = before.get(task_id)
        if earlier is None:
            continue
        steps = stats[2] - earlier[2][2]
        wakes = stats[6] - earlier[2][6]
        if wakes >= SPIN_MIN_RATE * window and wakes >= SPIN_MIN_SHARE * steps:
            findings.append({
                "kind": "FINDING_KIND_SPINNING",
                "summary": _admin._text(
                    f"{label(task_id)} woke itself {wakes} times in {window:g} s "
                    f"({wakes / window:.0f}/s: a bare yield or asyncio.sleep(0) in a loop) "
                    f"and waited for nothing else", 1000),
                "tasks": [info(task_id, True)],
            })

    # What each waiting task waits on.
    waits = _waits_on_futures(before, after)
    del before
    task_of = {fid: _mt_id(pair[0]) for fid, pair in waits.items()}
    # Read once (each read waits out the task's step): the walk, the
    # primitives and the deadlines all use it.
    chains = {fid: _await_chain(pair[0]) for fid, pair in waits.items()}
    walked = _next_window(waits, task_of)
    lost, primitive_of = _walk_up(walked, chains,
                                  (after, *after.values(), waits, chains, *chains.values()))
    # Our primitives' awaiters name what they wait on: every wait gets its
    # primitive, walked or not.
    kinds = _primitive_types()
    for fid, chain in chains.items():
        owner = getattr(chain[-1], "_owner", None) if chain else None
        if isinstance(owner, kinds):
            primitive_of[fid] = owner
    for fid, primitive in primitive_of.items():
        waits_on[task_of[fid]] = _admin._text(
            f"{_primitive_kind(primitive)} {_admin._text(repr(primitive), 200)}")
    for fid in sorted(lost, key=lambda f: task_of[f]):
        task_id = task_of[fid]
        task, fut = waits[fid]
        # Completed while the walk ran (its referrers were changing then),
        # or bounded by a timeout: not lost.
        if fut.done() or task._fut_waiter is not fut or _under_a_deadline(chains[fid]):
            continue
        what = waits_on.get(task_id) or _admin._describe_waiter(fut)
        findings.append({
            "kind": "FINDING_KIND_LOST_WAKEUP",
            "summary": _admin._text(
                f"{label(task_id)} waits on {what} that nothing else references: "
                f"nothing can complete it", 1000),
            "tasks": [info(task_id, True)],
            "stack": [_admin._frame_info(f) for f in task.get_stack(limit=MAX_FRAMES)],
        })

    # The primitives, their holders and waiters; the wait-for graph.
    edges = collections.defaultdict(list)
    by_primitive = {}
    for fid, primitive in primitive_of.items():
        task, fut = waits[fid]
        task_id = task_of[fid]
        entry = by_primitive.setdefault(id(primitive), (primitive, []))
        entry[1].append({"task_id": task_id, "task_name": _admin._text(names.get(task_id, "")),
                         "role": _waiter_role(primitive, fut)})
        holder = _holder(primitive) if entry[1][-1]["role"] == "acquire" else 0
        if holder and holder != task_id:
            edges[task_id].append((holder, f"{_primitive_kind(primitive)} "
                                           f"{_admin._text(repr(primitive), 120)}"))
    for task_id, (_, task, stats, fut) in after.items():
        if stats[1] == "waiting" and fut is not None and _is_task(fut) and not fut.done():
            awaited = fut._mt_stats()
            if awaited is not None and task_id not in edges:
                edges[task_id].append((awaited[0], "its result"))
    primitives = []
    for primitive, waiters in by_primitive.values():
        holder = _holder(primitive)
        primitives.append({
            "kind": _primitive_kind(primitive),
            "repr": _admin._text(repr(primitive)),
            "holder_task_id": holder,
            "holder_task_name": _admin._text(names.get(holder, "")) if holder else "",
            "waiters": sorted(waiters, key=lambda w: w["task_id"]),
        })
    primitives.sort(key=lambda p: (p["kind"], p["repr"]))
    for cycle in _cycles(edges):
        lines = [f"{label(a)} waits for {why} held by {label(b)}"
                 if why != "its result" else f"{label(a)} awaits {label(b)}"
                 for a, b, why in cycle]
        findings.append({
            "kind": "FINDING_KIND_DEADLOCK",
            "summary": _admin._text(f"{len(cycle)} tasks wait on each other: "
                                    + "; ".join(lines), 2000),
            "tasks": [info(a, True) for a, _, _ in cycle if a in after],
            "primitives": [why for _, _, why in cycle if why != "its result"],
        })
    return {
        "findings": findings[:MAX_FINDINGS],
        "primitives": primitives[:MAX_FINDINGS],
        "tasks_examined": len(after),
        "spin_window_seconds": window,
        "long_steps_recorded": _recorded,
        "long_steps_dropped": _dropped,
        "stacks_supported": stacks_supported(),
        "waits_total": len(waits),
        "waits_checked": len(walked),
    }


def _under_a_deadline(chain):
    """Whether an asyncio.timeout() (or wait_for) in a task's await chain
    will end the wait: then it is not lost, only bounded."""
    from . import timeouts
    kinds = (timeouts.Timeout, _stdlib_asyncio.Timeout)
    for obj in chain:
        for ref in gc.get_referents(obj):
            ref = getattr(ref, "__self__", ref)  # async with's bound __aexit__.
            if isinstance(ref, kinds) and ref.when() is not None:
                return True
    return False


_window_start = 0
_window_lock = threading.Lock()


def _next_window(waits, task_of):
    """At most MAX_WALKED of `waits` for the walk, in task id order from
    where the previous call stopped: the walk costs the heap's size times
    the futures walked, so a process with many waiting tasks has them
    checked over several calls."""
    global _window_start
    if len(waits) <= MAX_WALKED:
        return dict(waits)
    order = sorted(waits, key=lambda fid: task_of[fid])
    with _window_lock:
        start = _window_start % len(order)
        _window_start = start + MAX_WALKED
    chosen = (order[start:] + order[:start])[:MAX_WALKED]
    return {fid: waits[fid] for fid in chosen}


def _mt_id(task):
    stats = task._mt_stats()
    return stats[0] if stats is not None else 0


def _after_fork_in_child():
    global _capture_pid
    _capture_pid = None
    _long_steps.clear()
    _start_capture()


_admin.register_method("Diagnose", _diagnose)
_start_capture()
os.register_at_fork(after_in_child=_after_fork_in_child)
