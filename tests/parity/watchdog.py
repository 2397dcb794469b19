"""A deadline for one scenario run.

A scenario that never finishes is a bug (a lost wakeup, a task nobody
wakes), and the useful report is what was waiting on what, not the test
runner's global timeout many minutes later. When a run outlives its
deadline the watchdog prints the running loop's tasks with the awaitables
each is suspended on, every thread's stack, and ends the process.
"""

import faulthandler
import os
import sys
import threading


class Deadline:
    """``with Deadline(seconds, label):`` around one blocking run."""

    def __init__(self, seconds, label):
        self._seconds = seconds
        self._label = label
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True,
                                        name="parity-watchdog")
        self._main = threading.get_ident()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()

    def _watch(self):
        if self._done.wait(self._seconds):
            return
        out = sys.stderr
        print(f"\n*** {self._label}: still running after {self._seconds} s",
              file=out, flush=True)
        loop = _running_loop_of(self._main)
        if loop is not None:
            _print_tasks(loop, out)
        faulthandler.dump_traceback(file=out, all_threads=True)
        out.flush()
        os._exit(3)


def _running_loop_of(thread_id):
    # The blocked thread sits in the loop's run_forever(): its `self`.
    frame = sys._current_frames().get(thread_id)
    while frame is not None:
        if frame.f_code.co_name == "run_forever":
            return frame.f_locals.get("self")
        frame = frame.f_back
    return None


def _print_tasks(loop, out):
    import mt_asyncio.asyncio as aio
    try:
        tasks = aio.all_tasks(loop)
    except Exception as e:  # noqa: BLE001 - a report, best effort.
        print(f"cannot list tasks: {e!r}", file=out)
        return
    print(f"{len(tasks)} task(s) on {loop!r}:", file=out)
    for task in tasks:
        print(f"  {task!r}", file=out)
        awaitable = task.get_coro()
        while awaitable is not None:
            frame = (getattr(awaitable, "cr_frame", None)
                     or getattr(awaitable, "gi_frame", None))
            where = (f"{frame.f_code.co_filename}:{frame.f_lineno}"
                     if frame is not None else "")
            print(f"    {type(awaitable).__qualname__} {where}", file=out)
            awaitable = (getattr(awaitable, "cr_await", None)
                         or getattr(awaitable, "gi_yieldfrom", None))
