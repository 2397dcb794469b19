"""TaskGroup, safe when its tasks finish on several workers at once.

Same contract as asyncio.TaskGroup: __aexit__ waits for every task; the
first failure cancels the others and the parent; errors come out as one
BaseExceptionGroup. The bookkeeping the done callbacks share (the set of
live tasks, the errors, the "all done" future) is under the group's lock,
and the "wait until empty" step re-checks emptiness under that lock before
it waits, so a last task finishing on another worker is never missed.

The lock and the shared fields live in ``_core._TaskGroupState``, whose
native done callback handles a task that returned (it leaves the set, and
the last one wakes __aexit__) on the worker that finished it; every other
outcome comes to ``_on_task_done`` here, scheduled as stdlib schedules it.
"""

import contextvars
from asyncio import events, exceptions

from . import _core, tasks

__all__ = ["TaskGroup"]


class TaskGroup:
    """Structured concurrency: ``async with TaskGroup() as tg:
    tg.create_task(...)``."""

    def __init__(self):
        self._state = _core._TaskGroupState()
        self._entered = False
        self._exiting = False
        self._loop = None
        self._parent_task = None
        self._parent_cancel_requested = False
        self._tasks = self._state.tasks
        self._errors = []
        self._base_error = None
        # Set once __aexit__ stopped waiting: a failure reported after that
        # must not cancel the parent any more (it has moved on).
        self._done_waiting = False

    # Set under `with self._state:` (as `self._state.aborting`): add() reads
    # it under the same lock.
    @property
    def _aborting(self):
        return self._state.aborting

    def __repr__(self):
        info = [""]
        if self._tasks:
            info.append(f"tasks={len(self._tasks)}")
        if self._errors:
            info.append(f"errors={len(self._errors)}")
        if self._aborting:
            info.append("cancelling")
        elif self._entered:
            info.append("entered")
        return f"<TaskGroup{' '.join(info)}>"

    async def __aenter__(self):
        if self._entered:
            raise RuntimeError(f"TaskGroup {self!r} has already been entered")
        if self._loop is None:
            self._loop = events.get_running_loop()
        self._parent_task = tasks.current_task(self._loop)
        if self._parent_task is None:
            raise RuntimeError(f"TaskGroup {self!r} cannot determine the parent task")
        # Where the scheduled _on_task_done runs: stdlib's add_done_callback
        # copies the context of the task calling create_task().
        self._state.bind(self._loop, self._parent_task, contextvars.copy_context(),
                         self._on_task_done)
        self._entered = True
        return self

    async def __aexit__(self, et, exc, tb):
        try:
            return await self._aexit(et, exc)
        finally:
            # Break reference cycles through tracebacks.
            self._parent_task = None
            self._state.release()
            self._errors = None
            self._base_error = None
            exc = None

    async def _aexit(self, et, exc):
        self._exiting = True
        if exc is not None and self._is_base_error(exc) and self._base_error is None:
            self._base_error = exc
        propagate_cancellation_error = (
            exc if et is not None and issubclass(et, exceptions.CancelledError) else None)
        if et is not None and not self._aborting:
            self._abort()

        while True:
            with self._state:
                if not self._tasks:
                    break
                self._state.waiter = fut = self._loop.create_future()
            try:
                await fut
            except exceptions.CancelledError as ex:
                if not self._aborting:
                    # The parent was cancelled from outside: cancel the
                    # children, then keep waiting for them.
                    propagate_cancellation_error = ex
                    self._abort()
            with self._state:
                self._state.waiter = None

        with self._state:
            self._done_waiting = True
            parent_cancel_requested = self._parent_cancel_requested
        # Every raise below clears the locals that hold the errors: this
        # frame ends up in the raised error's traceback, and must not keep
        # the errors alive through it (asyncio's tests check for the cycle).
        if self._base_error is not None:
            try:
                raise self._base_error
            finally:
                exc = None
        if parent_cancel_requested:
            # We cancelled the parent ourselves; undo it unless someone else
            # also asked for it.
            if self._parent_task.uncancel() == 0:
                propagate_cancellation_error = None
        try:
            if propagate_cancellation_error is not None and not self._errors:
                try:
                    raise propagate_cancellation_error
                finally:
                    exc = None
        finally:
            propagate_cancellation_error = None
        if et is not None and not issubclass(et, exceptions.CancelledError):
            self._errors.append(exc)
        if self._errors:
            # The parent is also being cancelled from outside: uncancel and
            # cancel again, so the group's error comes out now and that
            # cancellation is still delivered at the parent's next await,
            # with the cancel count unchanged.
            if self._parent_task.cancelling():
                self._parent_task.uncancel()
                self._parent_task.cancel()
            try:
                raise BaseExceptionGroup("unhandled errors in a TaskGroup",
                                         self._errors) from None
            finally:
                exc = None
        return None

    def create_task(self, coro, *, name=None, context=None):
        """Create a task in the group (see asyncio.TaskGroup.create_task)."""
        if not self._entered:
            coro.close()
            raise RuntimeError(f"TaskGroup {self!r} has not been entered")
        if self._exiting and not self._tasks:
            coro.close()
            raise RuntimeError(f"TaskGroup {self!r} is finished")
        if self._aborting and not self._abort_unseen_by_parent():
            coro.close()
            raise RuntimeError(f"TaskGroup {self!r} is shutting down")
        # The parent awaits its group's tasks (call-graph introspection),
        # recorded before the task's first step, as on one thread.
        task = _core._create_awaited_task(self._loop, self._parent_task, coro,
                                          name, context)
        # In the set before its done callback can possibly run. Another
        # task's failure may have begun the abort since the check above (its
        # done callback runs on another worker, beside this step), and the
        # abort cancels only what was in the set then: a task added after
        # it is cancelled here, as it would have been had this call come
        # first on one thread. Without this it ran on, and __aexit__ waited
        # for it forever.
        aborting = self._state.add(task)
        if aborting:
            task.cancel()
        return task

    def _abort_unseen_by_parent(self):
        # A child's failure began the abort during the parent's current
        # step (the cancel it asked for is still pending: the parent has
        # not reached an await since). On one thread that failure could
        # only be handled after this step, so the step's create_task()
        # calls come first: their tasks join the group and are cancelled
        # rather than refused.
        with self._state:
            parent = self._parent_task
            return (self._parent_cancel_requested and parent is not None
                    and parent is tasks.current_task(self._loop)
                    and parent._must_cancel)

    @staticmethod
    def _is_base_error(exc):
        return isinstance(exc, (SystemExit, KeyboardInterrupt))

    def _abort(self):
        with self._state:
            self._state.aborting = True
            live = list(self._tasks)
        self._cancel_all(live)

    @staticmethod
    def _cancel_all(live):
        for t in live:
            if not t.done():
                t.cancel()

    def _on_task_done(self, task):
        exc = None if task.cancelled() else task.exception()
        parent = self._parent_task
        _core.future_discard_from_awaited_by(task, parent)
        live = []
        orphaned = False
        with self._state:
            # Leaving the set and recording the error happen together: once
            # __aexit__ sees the set empty, every error is in the list.
            self._tasks.discard(task)
            fut = self._state.waiter if not self._tasks else None
            if exc is not None:
                if self._errors is not None:
                    self._errors.append(exc)
                if self._is_base_error(exc) and self._base_error is None:
                    self._base_error = exc
                orphaned = parent is None or parent.done() or self._done_waiting
                if (not orphaned and not self._aborting
                        and not self._parent_cancel_requested):
                    # First failure: cancel the rest and make the parent
                    # stop waiting in its body (its __aexit__ turns this into
                    # the error group). Requested under the lock, so
                    # __aexit__ either sees the request or it never comes.
                    self._parent_cancel_requested = True
                    self._state.aborting = True
                    live = list(self._tasks)
                    parent.cancel()
        if fut is not None and not fut.done():
            try:
                fut.set_result(True)
            except exceptions.InvalidStateError:
                pass  # The parent was cancelled meanwhile.
        if orphaned:
            self._loop.call_exception_handler({
                "message": f"Task {task!r} has errored out but its parent "
                           f"task {parent} is already completed",
                "exception": exc,
                "task": task,
            })
            return
        self._cancel_all(live)
