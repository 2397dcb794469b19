"""`bench --quick` runs every cell and prints the table."""

import json
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                     "benchmarks", "bench.py")


sys.path.insert(0, os.path.dirname(BENCH))
import backends  # noqa: E402 - the driver's own tables of what exists.
import net  # noqa: E402
import workloads  # noqa: E402


def _peers_here():
    found = []
    for module in ("uvloop", "rloop"):
        try:
            __import__(module)
            found += [module, f"{module}-multiloop"]
        except ImportError:
            pass
    try:
        import tonio  # noqa: F401
        found.append("tonio")
    except ImportError:
        pass
    if os.access(net.PYPI_MT_ASYNCIO_PYTHON, os.X_OK):
        found.append("mt-asyncio-0.3.0a1")
    return found


def test_quick_run_with_every_backend_has_every_cell(tmp_path):
    # --backends all: every cell is in the JSON, measured or FAIL with a
    # reason; ours and stdlib's never fail. (Both thread counts asked for:
    # --quick alone runs the parallel backends at 2 only.)
    out_json = tmp_path / "bench.json"
    proc = subprocess.run(
        # The test build of the extension is not optimized: allowed here,
        # the numbers are not the point. A peer that hangs in a cell (rloop
        # on a thread of its own, now and then) is a FAIL after 60 s.
        [sys.executable, BENCH, "--quick", "--scale", "0.002", "--allow-unoptimized",
         "--cell-timeout", "60", "--workers",
         "--backends", "all", "--threads", "1", "2", "--json", str(out_json)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    header = next(line for line in proc.stdout.splitlines() if line.startswith("workload"))
    assert header.split()[:3] == ["workload", "backend", "threads"]
    data = json.loads(out_json.read_text())
    assert data["args"]["repeats"] == 1
    # The hypervisor's steal over the run: a share, or None without /proc.
    stolen = data["cpu_steal_share"]
    assert stolen is None or 0 <= stolen < 1, stolen
    # The cache-line round trip before every CPU cell, where two CPUs are
    # there to measure it between.
    trip = data["cpu_round_trip"]
    if len(os.sched_getaffinity(0)) >= 2:
        assert 0 < trip["min_ns"] <= trip["median_ns"] <= trip["max_ns"] < 1e6, trip
        assert trip["cells"] >= sum(len(r["times"]) for r in data["rows"] if "times" in r)
        assert 0 <= trip["far_cells"] <= trip["cells"]
        assert all(len(r["round_trips_ns"]) == len(r["times"])
                   for r in data["rows"] if "times" in r)
        assert "cache-line round trip between CPUs" in proc.stdout
    else:
        assert trip is None
    expected = {"asyncio", "asyncio-multiloop", "mt_asyncio", "mt_asyncio+watch",
                *_peers_here()}
    rows = {(r["workload"], r["backend"], r["threads"]): r for r in data["rows"]}
    for workload in workloads.WORKLOADS:
        # The TLS workloads add mt_asyncio's ssl-module row (and only they).
        tls = workload in workloads.TLS_WORKLOADS
        assert ((workload, "mt_asyncio+ssl", 1) in rows) == tls, workload
        for backend in expected | ({"mt_asyncio+ssl"} if tls else set()):
            for threads in ([1] if backend in backends.SINGLE_THREADED else [1, 2]):
                row = rows[(workload, backend, threads)]
                if not _measured_once(row, "times"):
                    continue
                if backend in ("mt_asyncio", "mt_asyncio+watch", "mt_asyncio+ssl"):
                    # Units run per worker: at least one per top-level coroutine.
                    assert sum(row["balance"]) >= row["coroutines"]
                elif backend not in ("mt-asyncio-0.3.0a1", "tonio"):
                    # Top-level coroutines per loop: each ran exactly once.
                    assert sum(row["balance"]) == row["coroutines"]
    _two_threads_over_one(data["rows"], proc.stdout)
    net_rows = {(r["workload"], r["backend"], r["threads"]): r for r in data["net_rows"]}
    db_skipped = "skipped db_http:" in proc.stdout
    for workload in net.NET_WORKLOADS:
        if workload in net.DB_WORKLOADS and db_skipped:
            continue
        for backend in net.net_backends():
            if backend == "mt_asyncio+ssl" and workload not in net.TLS_WORKLOADS:
                assert (workload, backend, 1) not in net_rows
                continue
            for threads in ([1] if backend in backends.SINGLE_THREADED else [1, 2]):
                _measured_once(net_rows[(workload, backend, threads)], "values")
    assert "network (server in its own process" in proc.stdout
    _replot_and_compare(out_json, tmp_path / "plots")


def _two_threads_over_one(rows, stdout):
    # Each 2-thread row's "2 thr/1 thr" cell is its backend's 1-thread
    # median over its own; --workers adds one busy share per worker of
    # each mt_asyncio cell.
    import report
    ratios = report.two_over_one(rows, network=False)
    by_cell = {(r["workload"], r["backend"], r["threads"]): r for r in rows}
    one, two = by_cell[("mixed", "mt_asyncio", 1)], by_cell[("mixed", "mt_asyncio", 2)]
    assert ratios[("mixed", "mt_asyncio")] == one["median"] / two["median"]
    assert ("mixed", "asyncio") not in ratios  # One thread only.
    line = next(l for l in stdout.splitlines() if l.split()[:3] == ["mixed", "mt_asyncio", "2"])
    assert f"{ratios[('mixed', 'mt_asyncio')]:.2f}x" in line.split()
    assert len(two["workers"]) == 2 and len(one["workers"]) == 1
    # Counters read just outside the timed run: a share a little over 1 is
    # the edges.
    assert all(0 <= w["busy_share"] <= 1.2 for w in two["workers"]), two["workers"]
    assert sum(w["busy_share"] for w in two["workers"]) > 0
    assert "what each mt_asyncio worker did" in stdout
    # The round-by-round comparison: one round here, so the paired ratio
    # is that round's stdlib time over the cell's, and stdlib's own row
    # has none.
    assert one["paired_ratio"] == by_cell[("mixed", "asyncio", 1)]["times"][0] / one["times"][0]
    assert one["rounds_won"] == (one["paired_ratio"] > 1)
    assert "paired_ratio" not in by_cell[("mixed", "asyncio", 1)]


def _measured_once(row, key):
    """A cell is one measurement (True) or a FAIL with a reason (False);
    stdlib's and ours never fail."""
    if "error" in row:
        assert row["error"].strip(), row
        assert row["backend"] not in ("asyncio", "mt_asyncio", "mt_asyncio+ssl"), row
        return False
    assert len(row[key]) == 1 and row[key][0] > 0, row
    return True


def _replot_and_compare(saved, plot_dir):
    # --from-json: no measuring; compared with itself every measured cell
    # is 1.00x; --plot writes the charts.
    pytest.importorskip("matplotlib", reason="matplotlib is not installed "
                        "(tools/setup.sh installs it)")
    proc = subprocess.run(
        [sys.executable, BENCH, "--from-json", str(saved), "--compare", str(saved),
         "--plot", str(plot_dir)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.split("faster now):", 1)[1].strip().split("\n\n")[0]
    changes = [line.split()[-1] for line in table.splitlines()[2:]]
    assert changes and all(c in ("1.00x", "-") for c in changes), changes
    names = set(os.listdir(plot_dir))
    assert {"speed_cpu.png", "speed_network.png", "scaling_mixed.png",
            "latency_http_cpu.png"} <= names
    assert all((plot_dir / n).stat().st_size > 1000 for n in names)
    _tabulate_merged(saved, plot_dir.parent)


def _tabulate_merged(saved, folder):
    # --markdown from two saved runs: the second's cells are merged in (one
    # cell replaced, one added) and every cell has a line in the detail
    # tables and a cell in the at-a-glance ones.
    data = json.loads(saved.read_text())
    replaced = dict(data["rows"][0], median=123.0, min=123.0, max=123.0,
                    times=[123.0])
    added = dict(data["rows"][0], threads=64, times=[1.0], median=1.0)
    later = folder / "later.json"
    later.write_text(json.dumps({"rows": [replaced, added], "net_rows": []}))
    md = folder / "report.md"
    proc = subprocess.run(
        [sys.executable, BENCH, "--from-json", str(saved), str(later),
         "--markdown", str(md)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = md.read_text()
    detail = [line for line in text.splitlines()
              if line.startswith("| ") and line.count("|") >= 8]
    lines = {tuple(c.strip() for c in line.split("|")[1:4]) for line in detail}
    for row in data["rows"] + data["net_rows"] + [added]:
        assert (row["workload"], row["backend"], str(row["threads"])) in lines, row
    first = data["rows"][0]
    mine = [line for line in detail if line.split("|")[1:4] == [
        f" {first['workload']} ", f" {first['backend']} ", f" {first['threads']} "]]
    assert len(mine) == 1 and "123.000" in mine[0], mine
    fails = sum(1 for r in data["rows"] + data["net_rows"] if r.get("error"))
    assert text.count("| FAIL |") >= fails
    assert "Two threads against one, CPU and scheduling workloads" in text


def test_a_failure_is_named_by_its_exception_not_by_a_warning_after_it():
    # A peer's loop failing at close prints a RuntimeWarning at exit, after
    # the traceback: the FAIL reason is the exception.
    stderr = ("Traceback (most recent call last):\n"
              '  File "rloop/loop.py", line 134, in close\n'
              "RuntimeError: Cannot close a running event loop\n"
              "<sys>:0: RuntimeWarning: coroutine 'RLoop.shutdown_asyncgens' "
              "was never awaited\n")
    assert net.failure_reason(stderr) == "RuntimeError: Cannot close a running event loop"
    # An exception without a message is named with the function that raised it.
    bare = ('Traceback (most recent call last):\n'
            '  File "rloop/loop.py", line 9, in create_unix_connection\n'
            "NotImplementedError\n")
    assert net.failure_reason(bare) == "NotImplementedError (in create_unix_connection)"


def test_quick_runs_parallel_backends_at_two_threads():
    import bench
    assert bench.parse_args(["--quick"]).threads == [2]
    assert bench.parse_args(["--quick", "--threads", "1", "4"]).threads == [1, 4]
    assert bench.parse_args([]).threads == [1, 2]


def test_paths_are_the_users_under_bazel_run(monkeypatch, tmp_path):
    # `bazel run` starts the driver in its runfiles tree and says where the
    # user was in BUILD_WORKING_DIRECTORY: relative paths mean that folder.
    import bench
    monkeypatch.setenv("BUILD_WORKING_DIRECTORY", str(tmp_path))
    args = bench.parse_args(["--json", "out.json", "--plot", "charts",
                             "--from-json", "a.json", "/abs/b.json"])
    assert args.json == str(tmp_path / "out.json")
    assert args.plot == str(tmp_path / "charts")
    assert args.from_json == [str(tmp_path / "a.json"), "/abs/b.json"]


def test_bad_arguments_are_refused():
    proc = subprocess.run([sys.executable, BENCH, "--threads", "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "must be positive" in proc.stderr



def test_watched_rows_run_with_a_live_watch_client(tmp_path):
    # mt_asyncio+watch: the control plane served and `mtctl watch` at 10 Hz
    # during the run; the cell fails if the client got no updates.
    out_json = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, BENCH, "--quick", "--scale", "0.002", "--allow-unoptimized",
         "--json", str(out_json), "--workloads", "mixed",
         "--backends", "asyncio", "mt_asyncio+watch", "--threads", "2"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out_json.read_text())
    assert {r["backend"] for r in data["rows"]} == {"asyncio", "mt_asyncio+watch"}


def test_db_rows_run_against_a_private_server_or_say_why_not(tmp_path):
    # db_http: a PostgreSQL-backed handler (query, CPU work, reply); the
    # driver starts the private cluster for it and stops it after.
    out_json = tmp_path / "bench.json"
    clusters_before = _cluster_dirs()
    proc = subprocess.run(
        [sys.executable, BENCH, "--quick", "--scale", "0.02", "--allow-unoptimized",
         "--json", str(out_json), "--workloads", "db_http", "--threads", "1", "2"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out_json.read_text())
    if "skipped db_http:" in proc.stdout:
        assert data["net_rows"] == []
        pytest.skip(proc.stdout.split("skipped db_http:")[1].splitlines()[0].strip())
    cells = {(r["backend"], r["threads"]) for r in data["net_rows"]}
    assert {("asyncio", 1), ("asyncio-multiloop", 2), ("mt_asyncio", 1),
            ("mt_asyncio", 2)} <= cells
    if os.access(net.PYPI_MT_ASYNCIO_PYTHON, os.X_OK):
        assert ("mt-asyncio-0.3.0a1", 1) in cells  # Measured, or FAIL with its reason.
    for row in data["net_rows"]:
        if "error" in row:  # A peer without what asyncpg needs (rloop, mt-asyncio 0.3.0a1).
            assert row["error"].strip(), row
            assert row["backend"] not in ("asyncio", "mt_asyncio", "mt_asyncio+ssl"), row
            continue
        assert len(row["values"]) == 1 and all(v > 0 for v in row["values"])
        assert sum(row["balance"]) == 32 * 4  # Every request served once.
    assert _cluster_dirs() <= clusters_before  # The cluster was removed.


def _cluster_dirs():
    return {d for d in os.listdir("/tmp") if d.startswith("mt_pg_")}
