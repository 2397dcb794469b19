"""timeout(), timeout_at() and Timeout, safe when the timer fires on one
worker while the task runs on another.

stdlib's Timeout cancels the task first and then records that it expired;
here the expiry and the cancel happen under the Timeout's own lock, and so
do __aexit__'s checks, so a task leaving the block on another thread sees
either "not expired" (and no cancel follows) or "expired" (and the cancel
is already requested).
"""

import enum
import threading
from asyncio import events, exceptions

from . import tasks

__all__ = ["Timeout", "timeout", "timeout_at", "wait_for"]


class _State(enum.Enum):
    CREATED = "created"
    ENTERED = "active"
    EXPIRING = "expiring"
    EXPIRED = "expired"
    EXITED = "finished"


class Timeout:
    """An async context manager that cancels the current task at a deadline
    (loop.time()) and turns that cancellation into TimeoutError."""

    def __init__(self, when):
        self._lock = threading.Lock()
        self._state = _State.CREATED
        self._timeout_handler = None
        self._task = None
        self._when = when
        self._cancelling = 0

    def when(self):
        return self._when

    def reschedule(self, when):
        with self._lock:
            if self._state is not _State.ENTERED:
                if self._state is _State.CREATED:
                    raise RuntimeError("Timeout has not been entered")
                raise RuntimeError(
                    f"Cannot change state of {self._state.value} Timeout")
            self._when = when
            if self._timeout_handler is not None:
                self._timeout_handler.cancel()
                self._timeout_handler = None
            if when is not None:
                loop = events.get_running_loop()
                if when <= loop.time():
                    self._timeout_handler = loop.call_soon(self._on_timeout)
                else:
                    self._timeout_handler = loop.call_at(when, self._on_timeout)

    def expired(self):
        return self._state in (_State.EXPIRING, _State.EXPIRED)

    def __repr__(self):
        info = [""]
        if self._state is _State.ENTERED:
            info.append(f"when={self._when:.3f}" if self._when is not None else "when=None")
        return f"<Timeout [{self._state.value}]{' '.join(info)}>"

    async def __aenter__(self):
        if self._state is not _State.CREATED:
            raise RuntimeError("Timeout has already been entered")
        task = tasks.current_task()
        if task is None:
            raise RuntimeError("Timeout should be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        with self._lock:
            self._state = _State.ENTERED
        self.reschedule(self._when)
        return self

    async def __aexit__(self, exc_type, exc_val, exc_tb):
        with self._lock:
            if self._timeout_handler is not None:
                self._timeout_handler.cancel()
                self._timeout_handler = None
            state = self._state
            if state is _State.EXPIRING:
                self._state = _State.EXPIRED
            elif state is _State.ENTERED:
                self._state = _State.EXITED
        if state is _State.EXPIRING:
            if self._task.uncancel() <= self._cancelling and exc_type is not None:
                # No other cancel request came: the cancellation is ours.
                if issubclass(exc_type, exceptions.CancelledError):
                    raise TimeoutError from exc_val
                if exc_val is not None:
                    # Something else was raised while the cancel unwound
                    # (in a finally): its chain shows the timeout too.
                    self._insert_timeout_error(exc_val)
                    if isinstance(exc_val, ExceptionGroup):
                        for exc in exc_val.exceptions:
                            self._insert_timeout_error(exc)
        return None

    @staticmethod
    def _insert_timeout_error(exc_val):
        """Puts a TimeoutError between the first CancelledError in the
        error's __context__ chain and what it led to, as asyncio does."""
        while exc_val.__context__ is not None:
            if isinstance(exc_val.__context__, exceptions.CancelledError):
                te = TimeoutError()
                te.__context__ = te.__cause__ = exc_val.__context__
                exc_val.__context__ = te
                break
            exc_val = exc_val.__context__

    def _on_timeout(self):
        with self._lock:
            if self._state is not _State.ENTERED:
                return
            self._state = _State.EXPIRING
            self._timeout_handler = None
            # Under the lock: __aexit__ on the task's thread waits for this.
            self._task.cancel()


def timeout(delay):
    """Timeout after `delay` seconds (None: never)."""
    loop = events.get_running_loop()
    return Timeout(loop.time() + delay if delay is not None else None)


def timeout_at(when):
    """Timeout at loop time `when` (None: never)."""
    return Timeout(when)


# wait_for's parameter is named `timeout`, as stdlib's is.
_timeout = timeout


# wait_for() is timeout() around one awaitable (as stdlib's is since 3.12),
# so it lives beside what it is built on.
async def wait_for(fut, timeout):
    """Wait for one awaitable with a timeout (TimeoutError, and the
    awaitable cancelled, when it runs out)."""
    if timeout is not None and timeout <= 0:
        fut = tasks.ensure_future(fut)
        if fut.done():
            return fut.result()
        await tasks._cancel_and_wait(fut)
        try:
            return fut.result()
        except exceptions.CancelledError as exc:
            raise TimeoutError from exc
    async with _timeout(timeout):
        return await fut
