"""Scenarios: call-graph introspection (3.14's capture_call_graph,
format_call_graph, print_call_graph, future_add_to_awaited_by and
`_asyncio_awaited_by`).

A graph is described by what a user reads off it: each node's kind and
task name ("Task-N" for default names, whose numbers depend on how many
tasks the process made before), the qualified names of the frames that
belong to this file (frames inside the library's own implementation differ
between backends by design), and the sorted descriptions of its awaiters.
"""

import io
import re

from harness import observe, scenario, since

_HERE = __file__


def _describe(graph):
    fut = graph.future
    get_name = getattr(fut, "get_name", None)
    if get_name is None:
        kind, name = "Future", ""
    else:
        kind, name = "Task", re.sub(r"^Task-\d+$", "Task-N", get_name())
    frames = [entry.frame.f_code.co_qualname for entry in graph.call_stack
              if entry.frame.f_code.co_filename == _HERE]
    parents = sorted(_describe(parent) for parent in graph.awaited_by)
    return (kind, name, frames, parents)


def _normalized(text):
    """format_call_graph() text with object ids blanked and frames outside
    this file dropped."""
    kept = []
    for line in text.splitlines():
        if line.lstrip().startswith("|   File") and _HERE not in line:
            continue
        kept.append(re.sub(r"id=0x[0-9a-f]+", "id=?", line))
    return kept


async def _wait_until(aio, predicate):
    """Polls `predicate` across loop turns (bounded: 5 s)."""
    for _ in range(5000):
        if predicate():
            return True
        await aio.sleep(0.001)
    return False


def _held_until_observed(aio, names, ready):
    """Starts a task per name that waits for a release, and an observer
    task that waits (bounded) until `ready(tasks)`, then returns
    [whether it got ready, the description of each task's graph] and
    releases them. Returns (tasks, observer). `ready` should also wait for
    the awaiting task to be suspended (its _fut_waiter set): a task still
    running on another worker is shown without its stack."""
    release = aio.Event()

    async def held(name):
        await release.wait()
        return name

    tasks = [aio.create_task(held(name), name=name) for name in names]

    async def observer():
        seen = await _wait_until(aio, lambda: ready(tasks))
        graphs = [_describe(aio.capture_call_graph(t)) for t in tasks]
        release.set()
        return [seen, graphs]

    return tasks, aio.create_task(observer(), name="observer")


async def _capture(aio, **kwargs):
    return aio.capture_call_graph(**kwargs)


async def _capture_through(aio, **kwargs):
    return await _capture(aio, **kwargs)


async def _child_graph(aio):
    await aio.sleep(0)
    return _describe(aio.capture_call_graph())


async def _first_step_graph(aio):
    # No suspension first: what the task sees at its very first step.
    return _describe(aio.capture_call_graph())


@scenario
@since(3, 14)
async def graph_current_task_stack_innermost_first(aio):
    aio.current_task().set_name("root")
    graph = await _capture_through(aio)
    return _describe(graph)


@scenario
@since(3, 14)
async def graph_current_task_depth_and_limit(aio):
    aio.current_task().set_name("root")
    out = []
    for kwargs in ({"depth": 2}, {"limit": 1}, {"limit": -1}, {"limit": 2},
                   {"limit": -2}, {"limit": 0}, {"depth": 2, "limit": 1}):
        out.append((sorted(kwargs.items()),
                    _describe(await _capture_through(aio, **kwargs))))
    return out


@scenario
@since(3, 14)
async def graph_gather_children_awaited_by_caller(aio):
    aio.current_task().set_name("parent")
    return await aio.gather(_child_graph(aio), _first_step_graph(aio))


@scenario
@since(3, 14)
async def graph_taskgroup_children_awaited_by_parent(aio):
    aio.current_task().set_name("parent")
    async with aio.TaskGroup() as tg:
        t1 = tg.create_task(_child_graph(aio), name="c1")
        t2 = tg.create_task(_first_step_graph(aio), name="c2")
    # Done tasks are awaited by nobody any more.
    return [t1.result(), t2.result(), t1._asyncio_awaited_by, t2._asyncio_awaited_by]


@scenario
@since(3, 14)
async def graph_shielded_task_awaited_by_caller(aio):
    aio.current_task().set_name("caller")
    first = await aio.shield(_first_step_graph(aio))
    later = await aio.shield(_child_graph(aio))
    return [first, later]


@scenario
@since(3, 14)
async def graph_task_awaiting_a_task_is_listed(aio):
    me = aio.current_task()
    me.set_name("outer")
    (inner,), watch = _held_until_observed(
        aio, ["inner"], lambda tasks: tasks[0]._asyncio_awaited_by
        and me._fut_waiter is not None)
    result = await inner
    return [result, await watch, inner._asyncio_awaited_by]


@scenario
@since(3, 14)
async def graph_plain_future_awaited_by_tasks(aio):
    loop = aio.get_running_loop()
    shared, single = loop.create_future(), loop.create_future()

    async def waiter(fut):
        return await fut

    tasks = [aio.create_task(waiter(shared), name="w1"),
             aio.create_task(waiter(shared), name="w2"),
             aio.create_task(waiter(single), name="w3")]
    seen = await _wait_until(
        aio, lambda: shared._asyncio_awaited_by is not None
        and len(shared._asyncio_awaited_by) == 2
        and single._asyncio_awaited_by is not None)
    graph = aio.capture_call_graph(shared)
    # One awaiter: the text's order does not depend on a set's.
    text = _normalized(aio.format_call_graph(single))
    shared.set_result(7)
    single.set_result(8)
    return [seen, _describe(graph), text, [await t for t in tasks]]


@scenario
@since(3, 14)
async def graph_wait_records_the_waiting_task(aio):
    me = aio.current_task()
    me.set_name("waiting")
    tasks, watch = _held_until_observed(
        aio, ["t0", "t1"], lambda tasks: all(t._asyncio_awaited_by for t in tasks)
        and me._fut_waiter is not None)
    done, pending = await aio.wait(tasks)
    return [len(done), len(pending), await watch,
            [t._asyncio_awaited_by for t in tasks]]


@scenario
@since(3, 14)
async def graph_format_and_print_current_task(aio):
    aio.current_task().set_name("root")

    async def inner():
        buf = io.StringIO()
        aio.print_call_graph(file=buf)
        return [_normalized(aio.format_call_graph()),
                _normalized(aio.format_call_graph(limit=1)),
                _normalized(buf.getvalue())]

    return await inner()


@scenario
@since(3, 14)
async def graph_outside_a_task_and_bad_arguments(aio):
    loop = aio.get_running_loop()
    from_callback = loop.create_future()
    loop.call_soon(lambda: from_callback.set_result(
        observe(aio.capture_call_graph)))
    no_loop = await loop.run_in_executor(None, observe, aio.capture_call_graph)
    return [await from_callback,
            no_loop,
            observe(aio.capture_call_graph, 42),
            observe(aio.format_call_graph, "x"),
            await loop.run_in_executor(None, observe, aio.format_call_graph)]


@scenario
@since(3, 14)
async def graph_explicit_awaited_by_entries(aio):
    loop = aio.get_running_loop()
    f1, f2, f3 = (loop.create_future() for _ in range(3))
    out = [f1._asyncio_awaited_by]
    aio.future_add_to_awaited_by(f1, f2)
    out.append(f1._asyncio_awaited_by == frozenset({f2}))
    aio.future_discard_from_awaited_by(f1, f2)
    out.append(f1._asyncio_awaited_by)  # One entry gone: None again.
    aio.future_add_to_awaited_by(f1, f2)
    aio.future_add_to_awaited_by(f1, f2)  # A second add makes it a set.
    aio.future_add_to_awaited_by(f1, f3)
    out.append(f1._asyncio_awaited_by == frozenset({f2, f3}))
    aio.future_discard_from_awaited_by(f1, f2)
    aio.future_discard_from_awaited_by(f1, f3)
    out.append(f1._asyncio_awaited_by)  # An emptied set: frozenset().
    aio.future_discard_from_awaited_by(f1, f3)  # Not there: no error.
    out.append(observe(aio.future_add_to_awaited_by, 1, 2))  # Not futures: ignored.
    out.append(observe(aio.future_add_to_awaited_by, f1))
    out.append(observe(aio.future_discard_from_awaited_by, f1, f2, f3))
    graph = aio.capture_call_graph(f2)
    out.append(_describe(graph))
    aio.future_add_to_awaited_by(f3, f2)
    out.append(_describe(aio.capture_call_graph(f3)))
    return out


@scenario
@since(3, 14)
async def capture_call_graph_deeper_than_the_task(aio):
    # Skipping more frames than the task's own stack has is no error (on a
    # worker nothing of a run loop lies beneath the coroutine, so our
    # graph then has no frames; stdlib's shows its run loop's).
    async def inner():
        return aio.capture_call_graph(depth=2), aio.current_task()

    graph, task = await inner()
    deeper = aio.capture_call_graph(depth=5)
    return [type(graph).__name__, graph.future is task,
            type(deeper).__name__, deeper.future is task]
