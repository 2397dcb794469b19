"""Other projects' own test suites, run on mt_asyncio and on stdlib's loop.

tools/setup.sh downloads the source distributions of anyio and aiohttp
(the versions it installs; both carry their ``tests/``). For each suite:
one pytest process on stdlib's loop, then one on mt_asyncio at 1 worker
and one at N workers (pytest_child.py, a plugin loaded before the
project's conftest). The tests run unmodified, against the installed
library. A test that hangs is reported with every thread's stack, and the
suite goes on in a new process without it. The result is printed as

    UPSTREAM anyio 4.16.0  stdlib 2284/2440  mt@1 2280/2284 (...)  mt@4 ...

where each mt figure counts the tests stdlib passes that pass on ours too:
a failure the environment causes (no IPv6 ``localhost``, no network)
fails on both and is out of the comparison by construction.

The check (--check): no test hangs; every test that passes on stdlib and
not on ours is listed, with its reason, in docs/compatibility.md's table
of upstream differences; and every test that built a loop on stdlib's run
and ran to an outcome on ours built ours there (a test that escaped to
stdlib's loop would prove nothing). With --enforce-bar, the share must
also meet the suite's bar at 1 and N workers (printed either way). A listed test
that passes now is reported, so the list does not go stale unnoticed.

Skipped, with the reason printed, where a suite's sources are not there
(tools/setup.sh could not download them).
"""

import argparse
import importlib.metadata
import json
import os
import pwd
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> (pytest arguments after the common ones, bar at 1 worker, at N).
SUITES = {
    # anyio's own configuration (pyproject.toml) applies: its pytest
    # plugin, strict markers, warnings as errors. Its asyncio parameters
    # are "asyncio" (asyncio.Runner's default loop: ours under compat) and
    # "asyncio+eager" (asyncio.new_event_loop() with the eager task
    # factory); trio and uvloop are deselected by pytest_child.py.
    "anyio": ((), 0.99, 0.99),
    # aiohttp's pytest.ini without its addopts (pytest-xdist, coverage and
    # doctests of the source tree), keeping its marker selection; with its
    # plugin's --aiohttp-fast (no gc.collect() after each test's loop),
    # which makes the suite about 2.7 times faster on both backends.
    "aiohttp": (("-o", "addopts=", "--aiohttp-fast",
                 "-m", "not dev_mode and not autobahn and not internal"),
                0.99, 0.97),
}
CHILD = os.path.join(HERE, "child_main.py")
_GIL_BUILD = not __import__("sysconfig").get_config_var("Py_GIL_DISABLED")
COMMON_ARGS = ("-p", "no:cacheprovider", "-q",
               "--timeout=0", "-o", "faulthandler_timeout=0", "tests")

_KNOWN_ROW = re.compile(
    r"^\|\s*(?P<suite>anyio|aiohttp)\s*\|\s*`(?P<test>tests/[^`]+)`\s*\|"
    r"\s*(?P<workers>1|N|all)\s*\|\s*(?P<reason>.+?)\s*\|\s*$")


def default_source_dir():
    # tools/setup.sh unpacks them here (HOME may be moved by the test
    # runner, so the account's own home is used).
    home = pwd.getpwuid(os.getuid()).pw_dir
    return os.path.join(home, ".cache", "mt_asyncio", "upstream")


def load_known(path):
    """{(suite, test id, "1"|"N"): reason} from docs/compatibility.md.
    A reason that starts with "Not run:" marks a test that is not started
    on our loop (one that cannot end once our side fails it)."""
    known = {}
    if not path or not os.path.exists(path):
        return known
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = _KNOWN_ROW.match(line.strip())
            if not m:
                continue
            for workers in (("1", "N") if m["workers"] == "all" else (m["workers"],)):
                known[(m["suite"], m["test"], workers)] = m["reason"]
    return known


def run_config(suite, source, backend, workers, args, log, skip=(), only=None):
    """Runs one suite on one backend until every collected test has a
    result (a new process after each hang). Returns {test id: result}."""
    extra = SUITES[suite][0]
    results = {t: {"id": t, "outcome": "not run", "detail": "listed as not run",
                   "ours": 0, "stdlib": 0, "units": 0} for t in skip}
    collected = None
    gil_seen = []
    deadline = time.monotonic() + args.suite_timeout
    label = f"{suite} {backend}@{workers}" if backend == "mt" else f"{suite} stdlib"
    with tempfile.TemporaryDirectory() as tmp:
        results_path = os.path.join(tmp, "results.jsonl")
        exclude_path = os.path.join(tmp, "exclude.txt")
        only_path = os.path.join(tmp, "only.txt")
        if only is not None:
            with open(only_path, "w", encoding="utf-8") as f:
                f.write("\n".join(only) + "\n")
        for attempt in range(30):
            with open(exclude_path, "w", encoding="utf-8") as f:
                f.write("\n".join(results) + "\n")
            open(results_path, "w").close()
            env = dict(os.environ,
                       PYTHONPATH=os.pathsep.join([HERE] + sys.path),
                       MT_UPSTREAM_BACKEND=backend,
                       MT_UPSTREAM_WORKERS=str(workers),
                       MT_UPSTREAM_TIMEOUT=str(args.test_timeout),
                       MT_UPSTREAM_RESULTS=results_path,
                       MT_UPSTREAM_EXCLUDE=exclude_path,
                       # The tests' own temporary files and sockets, and
                       # hypothesis's example database (not in the sources).
                       TMPDIR=tmp,
                       HYPOTHESIS_STORAGE_DIRECTORY=os.path.join(tmp, "hypothesis"))
            env.pop("MT_UPSTREAM_ONLY", None)
            if only is not None:
                env["MT_UPSTREAM_ONLY"] = only_path
            # -P: the sources' own package directory (aiohttp/ in its
            # sdist) must not shadow the installed library.
            cmd = [sys.executable, "-P", "-X", "faulthandler", CHILD,
                   *COMMON_ARGS[:-1], *extra, COMMON_ARGS[-1]]
            left = deadline - time.monotonic()
            if left <= 1:
                log.write(f"--- {label}: out of time ({args.suite_timeout:.0f} s)\n")
                break
            output_path = os.path.join(tmp, "output.txt")
            started = time.monotonic()
            # Output goes to a file, not a pipe: a process a test leaves
            # behind may hold what it inherited.
            with open(output_path, "w+b") as output:
                try:
                    proc = subprocess.run(cmd, cwd=source, env=env, stdout=output,
                                          stderr=subprocess.STDOUT, timeout=left)
                    rc = proc.returncode
                except subprocess.TimeoutExpired:
                    rc = "timeout"
                output.seek(0)
                text = output.read().decode(errors="replace")
            got_new = False
            with open(results_path, encoding="utf-8") as f:
                for line in f:
                    item = json.loads(line)
                    if "gil_enabled" in item:
                        gil_seen.append(item["gil_enabled"])
                        continue
                    if "collected" in item:
                        if collected is None:
                            collected = list(item["collected"])
                        continue
                    results[item["id"]] = item
                    got_new = True
            if rc != 0 or args.verbose:
                log.write(f"--- {label} attempt {attempt}: exit {rc} after"
                          f" {time.monotonic() - started:.0f} s\n{text[-30000:]}\n")
                log.flush()
            if rc == 0 or rc == "timeout" or not got_new:
                break
    if any(gil_seen) and not _GIL_BUILD:
        log.write(f"--- {label}: the GIL was enabled during the run (an extension"
                  " module without free-threading support): tasks did not run"
                  " in parallel\n")
        print(f"  note: {label}: the GIL was enabled during the run", flush=True)
    for test_id in collected or ():
        results.setdefault(test_id, {"id": test_id, "outcome": "not run",
                                     "detail": "", "ours": 0, "stdlib": 0, "units": 0})
    return results, collected is not None


def run_with_rerun(suite, source, backend, workers, args, log, skip=()):
    """As CPython's own runner does (--rerun): what failed or hung runs
    once more, alone with the other failures, in a new process; if it
    passes then, it counts as passed and is reported as flaky."""
    results, ok = run_config(suite, source, backend, workers, args, log, skip)
    failed = [t for t, r in results.items() if r["outcome"] in ("fail", "error", "hang")]
    if failed and ok:
        again, _ = run_config(suite, source, backend, workers, args, log, only=failed)
        for test_id in failed:
            if again.get(test_id, {}).get("outcome") == "pass":
                results[test_id] = dict(again[test_id], flaky=results[test_id]["outcome"])
    return results, ok


def summarize(suite, version, std, mt_runs, known):
    """Prints the suite's lines; returns (problems, {"1"|"N": (ok, total)})."""
    stdlib_passed = {t for t, r in std.items() if r["outcome"] == "pass"}
    # Tests that built a loop of stdlib's on stdlib's run: on ours each
    # must have built one of ours.
    used_loop = {t for t, r in std.items() if r.get("stdlib", 0) > 0}
    parts = [f"UPSTREAM {suite} {version}  stdlib {len(stdlib_passed)}/{len(std)}"]
    problems, counts, notes = [], {}, []
    for label, results in mt_runs:
        key = "1" if label == "1" else "N"
        passed = {t for t, r in results.items() if r["outcome"] == "pass"}
        ok = stdlib_passed & passed
        on_ours = sum(1 for r in results.values()
                      if r.get("ours", 0) > 0 or r.get("units", 0) > 0)
        escaped = sorted(t for t in used_loop
                         if t in results
                         and results[t]["outcome"] in ("pass", "fail", "error")
                         and results[t].get("ours", 0) == 0
                         and results[t].get("units", 0) == 0)
        share = len(ok) / len(stdlib_passed) if stdlib_passed else 1.0
        parts.append(f"mt@{label} {len(ok)}/{len(stdlib_passed)} ({share:.1%};"
                     f" ran our loop: {on_ours} tests)")
        counts[key] = (len(ok), len(stdlib_passed))
        for test_id in escaped:
            problems.append(f"{suite} {test_id} mt@{label}: built a loop on stdlib's"
                            " run but none of ours here (not a test of our loop)")
        for test_id, r in sorted(results.items()):
            if r.get("flaky") == "hang":
                notes.append(f"  FLAKY HANG: {test_id} mt@{label} hung, then passed"
                             " on rerun (a bug to find)")
            elif r.get("flaky"):
                notes.append(f"  flaky: {test_id} mt@{label} passed on rerun")
        for test_id in sorted(stdlib_passed - passed):
            r = results.get(test_id, {"outcome": "not run", "detail": ""})
            if r["outcome"] == "hang":
                problems.append(f"{suite} {test_id} mt@{label}: HANG")
            elif (suite, test_id, key) in known:
                notes.append(f"  known: {test_id} mt@{label}: {r['outcome']}")
            else:
                last = (r.get("detail", "").strip().splitlines() or [""])[-1][:200]
                problems.append(f"{suite} {test_id} mt@{label}: {r['outcome']} (not"
                                f" listed in docs/compatibility.md): {last}")
        for (s, test_id, k) in known:
            if s == suite and k == key and test_id in passed:
                notes.append(f"  note: {test_id} is listed for mt@{label} but passed")
    print("  ".join(parts), flush=True)
    for line in notes:
        print(line, flush=True)
    return problems, counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="*", help="default: " + ", ".join(SUITES))
    parser.add_argument("--workers", type=int,
                        default=int(os.environ.get("MT_UPSTREAM_WORKERS_N", "4")),
                        help="N, the parallel worker count (the other run uses 1)")
    parser.add_argument("--source-dir", default=os.environ.get("MT_UPSTREAM_DIR")
                        or default_source_dir())
    parser.add_argument("--suite-timeout", type=float, default=1800.0,
                        help="seconds for one suite on one backend")
    parser.add_argument("--test-timeout", type=float, default=60.0)
    parser.add_argument("--known", default=os.path.join(
        HERE, "..", "..", "docs", "compatibility.md"))
    parser.add_argument("--check", action="store_true",
                        help="exit 1 on a hang, an unlisted difference or a"
                             " test that escaped our loop")
    parser.add_argument("--enforce-bar", action="store_true",
                        help="with --check: exit 1 below a suite's bar too")
    parser.add_argument("--log", default=None, help="default: stderr")
    parser.add_argument("--verbose", action="store_true",
                        help="log every pytest process's output")
    args = parser.parse_args()

    import sysconfig
    ft = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    print(f"interpreter: {sys.executable} {sys.version.split()[0]}"
          f" ({'free-threaded' if ft else 'GIL build'}); N = {args.workers}",
          flush=True)
    known = load_known(os.path.abspath(args.known))
    log = open(args.log, "a") if args.log else sys.stderr
    all_problems, status = [], 0
    for suite in args.suites or list(SUITES):
        try:
            version = importlib.metadata.version(suite)
        except importlib.metadata.PackageNotFoundError:
            print(f"SKIPPED {suite}: not installed in {sys.executable} (tools/setup.sh)")
            continue
        source = os.path.join(args.source_dir, f"{suite}-{version}")
        if not os.path.isdir(os.path.join(source, "tests")):
            print(f"SKIPPED {suite}: no sources of {suite} {version} with tests/ in"
                  f" {args.source_dir} (tools/setup.sh downloads them from PyPI)")
            continue
        started = time.monotonic()
        std, ok = run_with_rerun(suite, source, "std", 1, args, log)
        if not ok:
            all_problems.append(f"{suite}: pytest collected nothing on stdlib's loop"
                                " (see the log)")
            print(f"UPSTREAM {suite} {version}: NOTHING COLLECTED", flush=True)
            continue
        mt_runs = []
        for w in (1, args.workers):
            key = "1" if w == 1 else "N"
            skip = [t for (s, t, k), reason in known.items()
                    if s == suite and k == key and reason.lower().startswith("not run:")]
            results, _ = run_with_rerun(suite, source, "mt", w, args, log, skip)
            mt_runs.append((str(w), results))
        problems, counts = summarize(suite, version, std, mt_runs, known)
        print(f"  ({time.monotonic() - started:.0f} s)", flush=True)
        for p in problems:
            print("  PROBLEM " + p, flush=True)
        all_problems += problems
        bars = {"1": SUITES[suite][1], "N": SUITES[suite][2]}
        for key, (ok_count, total) in sorted(counts.items()):
            share = ok_count / total if total else 1.0
            verdict = "ok" if share >= bars[key] else "BELOW BAR"
            label = "1" if key == "1" else str(args.workers)
            print(f"UPSTREAM TOTAL {suite} mt@{label}: {ok_count}/{total} of what"
                  f" stdlib passes ({share:.1%}; bar {bars[key]:.0%}) {verdict}",
                  flush=True)
            if share < bars[key] and args.enforce_bar:
                status = 1
    if all_problems:
        status = 1
    print(f"{len(all_problems)} problems")
    return status if args.check else 0


if __name__ == "__main__":
    sys.exit(main())
