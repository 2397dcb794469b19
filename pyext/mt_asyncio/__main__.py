"""python -m mt_asyncio [--threads N] MODULE|SCRIPT.py [ARGS...]

Runs a module (as ``python -m MODULE ARGS`` would) or a script on
mt_asyncio's parallel loop without changing it: mt_asyncio.compat is
installed first, so ``asyncio.run()``, ``asyncio.Runner`` and
``asyncio.new_event_loop()`` make the parallel loop and the libraries the
program imports get mt_asyncio's thread-safe primitives. For servers whose
command line has no loop option of its own::

    python -m mt_asyncio hypercorn app:app --bind 0.0.0.0:8000
    python -m mt_asyncio --threads 8 service.py --port 8080

``--threads N`` sets ``MT_ASYNCIO_THREADS``, the worker count every
runtime started without one takes (the default is ``os.cpu_count() + 4``).
"""

import os
import runpy
import sys

USAGE = "usage: python -m mt_asyncio [--threads N] MODULE|SCRIPT.py [ARGS...]"


def _parse(argv):
    threads = os.environ.get("MT_ASYNCIO_THREADS", "").strip() or None
    args = list(argv)
    while args and args[0].startswith("-"):
        option = args.pop(0)
        if option in ("-h", "--help"):
            print(__doc__.strip())
            raise SystemExit(0)
        if option == "--threads" and args:
            threads = args.pop(0)
        elif option.startswith("--threads="):
            threads = option.partition("=")[2]
        else:
            raise SystemExit(f"python -m mt_asyncio: unknown option {option!r}\n{USAGE}")
    if not args:
        raise SystemExit(USAGE)
    if threads is not None and (not str(threads).isdigit() or int(threads) < 1):
        raise SystemExit(f"python -m mt_asyncio: threads must be a whole number >= 1, "
                         f"not {threads!r}")
    return (None if threads is None else int(threads)), args[0], args[1:]


def main(argv=None):
    threads, target, rest = _parse(sys.argv[1:] if argv is None else argv)
    if threads is not None:
        # Read when the runtime starts, in this process or in the worker
        # processes a server forks or spawns. (Starting it here, before a
        # fork, would leave the children a runtime without threads.)
        os.environ["MT_ASYNCIO_THREADS"] = str(threads)
    from . import compat
    compat.install()
    sys.argv = [target, *rest]
    if target.endswith(".py") or os.sep in target:
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")
    else:
        sys.path.insert(0, os.getcwd())  # As `python -m` has it.
        runpy.run_module(target, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
