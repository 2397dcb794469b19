"""mt_asyncio's benchmark driver: ``bazel run //pyext:bench -- [options]``.

Runs every (backend, workload, threads) cell ``--repeats`` times in
interleaved rounds, each time in a fresh subprocess (one warm-up, one counted
run), and prints one table of medians, spreads and ratios against stdlib
asyncio measured in the same run. The workloads, the method and the
goals: docs/benchmarks.md.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import sysconfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import backends  # noqa: E402
import hostcpu  # noqa: E402
from cell import gil_enabled  # noqa: E402
import net  # noqa: E402
import report  # noqa: E402
import workloads  # noqa: E402

ALL_WORKLOADS = sorted(workloads.WORKLOADS) + sorted(net.NET_WORKLOADS)
# Every network server backend is one of these too (net.net_backends() says
# which are installed; not asked here, so a cell's process imports no peer
# it does not run).
ALL_BACKENDS = list(backends.BACKENDS)
# Rows that answer a question of their own, asked for by name: the control
# plane's cost (`--backends asyncio mt_asyncio mt_asyncio+watch`).
OPT_IN_BACKENDS = {"mt_asyncio+watch", "mt_asyncio+ssl"}
# mt_asyncio's TLS through the ssl module instead of its native engine: a
# row of the TLS workloads only, beside mt_asyncio's whenever that runs.
SSL_PATH_BACKEND = "mt_asyncio+ssl"
TLS_WORKLOADS = net.TLS_WORKLOADS | workloads.TLS_WORKLOADS


def backends_for(workload, chosen):
    """The backends a workload runs on: the chosen ones, with the ssl-module
    row beside mt_asyncio's for a TLS workload (and only there)."""
    if workload not in TLS_WORKLOADS:
        return [b for b in chosen if b != SSL_PATH_BACKEND]
    if "mt_asyncio" in chosen and SSL_PATH_BACKEND not in chosen:
        at = chosen.index("mt_asyncio") + 1
        return chosen[:at] + [SSL_PATH_BACKEND] + chosen[at:]
    return list(chosen)


def interpreter_facts():
    facts = {
        "executable": sys.executable,
        "version": platform.python_version(),
        "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "debug_build": bool(sysconfig.get_config_var("Py_DEBUG")),
        "gil_enabled": gil_enabled(),
    }
    try:
        import mt_asyncio
        facts["extension"] = mt_asyncio.build_info()
    except ImportError as exc:
        facts["extension"] = {"error": str(exc)}
    return facts


def cpu_times():
    """The machine's (busy-or-idle total, stolen) CPU time in clock ticks
    since boot, from /proc/stat; None where there is none. Steal is time a
    hypervisor ran someone else on our virtual CPUs: on a shared VM it
    widens every spread, and the report states it."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal (guest time is in user).
    return sum(fields[:8]), fields[7] if len(fields) > 7 else 0


def steal_share(before, after):
    """The share of CPU time stolen between two cpu_times() readings."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])


# Runs one cell in its process; imports only the backends and workloads.
CELL_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cell.py")
CELL_TIMEOUT_S = 600  # --cell-timeout


def run_rounds(cells, repeats, run_one):
    """Runs every (backend, threads) cell `repeats` times, interleaved: each
    round runs every cell once, in a rotated order, so drift on a shared
    machine lands on every cell alike instead of on whichever ran last.
    `run_one` returns a result or raises net.CellFailed; a failed cell is
    not run again. Returns ({cell: [results]}, {cell: why it failed})."""
    results = {c: [] for c in cells}
    failed = {}
    for r in range(repeats):
        for cell in cells[r % len(cells):] + cells[:r % len(cells)]:
            if cell in failed:
                continue
            try:
                results[cell].append(run_one(*cell))
            except net.CellFailed as e:
                failed[cell] = str(e)
    return results, failed


def paired_with(baseline_times, times):
    """The cell against stdlib's, round by round: the median of the
    per-round ratios (stdlib's time over the cell's, both from the same
    round) and how many rounds the cell was faster. A drift on the machine
    moves both runs of a round together, so this says more than the ratio
    of the medians when the two are close. Empty when the rounds cannot be
    paired (no stdlib cell, or a cell that failed part of the way)."""
    if not baseline_times or len(baseline_times) != len(times):
        return {}
    per_round = [b / t for b, t in zip(baseline_times, times)]
    return {"paired_ratio": statistics.median(per_round),
            "rounds_won": sum(r > 1 for r in per_round)}


def spawn_cell(backend, workload, threads, scale, timeout=CELL_TIMEOUT_S):
    """One cell in a fresh process (one warm-up, one counted run): its
    result; net.CellFailed when the backend failed the workload (a peer
    that cannot run it)."""
    python, env = sys.executable, dict(os.environ)
    if backend == "mt-asyncio-0.3.0a1":
        python = net.PYPI_MT_ASYNCIO_PYTHON
        env.pop("PYTHONPATH", None)  # Ours would shadow mt-asyncio 0.3.0a1's package.
    cmd = [python, CELL_SCRIPT,
           json.dumps([backend, workload, threads, scale])]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise net.CellFailed(f"no result in {timeout:g} s") from None
    if proc.returncode != 0:
        raise net.CellFailed(net.failure_reason(proc.stderr)
                             or f"exit status {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def backend_unavailable(backend):
    """Why `backend` cannot run here, or None."""
    module = backends.PEER_MODULES.get(backend)
    if module is not None:
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (tools/setup.sh installs it)"
    if backend == "mt-asyncio-0.3.0a1" and not os.access(net.PYPI_MT_ASYNCIO_PYTHON, os.X_OK):
        return (f"no venv with mt-asyncio 0.3.0a1's mt-asyncio at {net.PYPI_MT_ASYNCIO_PYTHON} "
                "(tools/setup.sh makes it; free-threaded interpreters only)")
    return None


def _two_over_one_cell(ratios, r):
    """The 2-thread row's speed over the same backend's 1-thread row."""
    ratio = ratios.get((r["workload"], r["backend"])) if r["threads"] == 2 else None
    return f"{ratio:.2f}x" if ratio is not None else "-"


def format_table(rows):
    header = ["workload", "backend", "threads", "median s", "spread s", "vs asyncio",
              "2 thr/1 thr", "balance"]
    lines = [header]
    ratios = report.two_over_one(rows, network=False)
    for r in rows:
        if r.get("error"):
            lines.append([r["workload"], r["backend"], str(r["threads"]), "FAIL",
                          "-", "-", "-", r["error"][:100]])
            continue
        lines.append([
            r["workload"], r["backend"], str(r["threads"]),
            f"{r['median']:.4f}", f"{r['min']:.4f}-{r['max']:.4f}",
            f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-",
            _two_over_one_cell(ratios, r),
            "/".join(str(c) for c in r["balance"] or []),
        ])
    return render(lines)


def worker_profile(rounds):
    """Per worker, the medians over the rounds of its share of the run's
    wall time spent running units (busy), and of its parks and steals."""
    out = []
    for i in range(min(len(r) for r in rounds)):
        mine = [r[i] for r in rounds]
        out.append({
            "busy_share": statistics.median(w["busy_ns"] / 1e9 / w["elapsed"] for w in mine),
            "parks": statistics.median(w["parks"] for w in mine),
            "steals": statistics.median(w["steals"] for w in mine),
            "units_run": statistics.median(w["units_run"] for w in mine),
        })
    return out


def format_workers_table(rows):
    header = ["workload", "backend", "threads", "busy share", "units run", "parks", "steals"]
    lines = [header]
    for r in rows:
        if "workers" not in r:
            continue
        ws = r["workers"]
        lines.append([r["workload"], r["backend"], str(r["threads"]),
                      "/".join(f"{w['busy_share']:.0%}" for w in ws),
                      "/".join(f"{w['units_run']:.0f}" for w in ws),
                      "/".join(f"{w['parks']:.0f}" for w in ws),
                      "/".join(f"{w['steals']:.0f}" for w in ws)])
    return render(lines)


def render(lines):
    """Aligned columns, a rule under the first line (the header)."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = []
    for n, line in enumerate(lines):
        out.append("  ".join(text.ljust(w) for text, w in zip(line, widths)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke run: small scale, one round, parallel backends "
                        "at 2 threads only")
    p.add_argument("--threads", type=int, nargs="+", default=None,
                   help="thread counts for parallel backends (default: 1 2; "
                        "--quick: 2)")
    p.add_argument("--workloads", nargs="+", default=None, choices=ALL_WORKLOADS)
    p.add_argument("--backends", nargs="+", default=None,
                   choices=sorted(ALL_BACKENDS) + ["all"],
                   help="default: every backend but the opt-in ones; 'all': every one")
    p.add_argument("--repeats", type=int, default=None, help="counted runs per cell (default 5)")
    p.add_argument("--scale", type=float, default=None, help="multiplies workload sizes")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--workers", action="store_true",
                   help="also print what each mt_asyncio worker did: its busy share of "
                        "the run, units run, parks and steals (the runtime's counters)")
    p.add_argument("--plot", metavar="DIR",
                   help="write PNG charts (matplotlib) of the results into DIR")
    p.add_argument("--compare", metavar="OLD_JSON",
                   help="print each cell's change against an earlier --json run")
    p.add_argument("--markdown", metavar="PATH",
                   help="write the report's tables (docs/benchmarks.md) as Markdown")
    p.add_argument("--from-json", metavar="PATH", nargs="+",
                   help="measure nothing: plot/compare/tabulate earlier --json "
                        "runs (several: their cells merged, a later file's "
                        "cell replacing an earlier one's)")
    p.add_argument("--cell-timeout", type=float, default=CELL_TIMEOUT_S, metavar="S",
                   help="seconds a cell's process may take before the cell is a FAIL "
                        f"(a peer that hangs; default {CELL_TIMEOUT_S})")
    p.add_argument("--allow-unoptimized", action="store_true",
                   help="run even on a debug/sanitizer extension (tests only: "
                        "the numbers are then not measurements)")
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 5
    if args.scale is None:
        args.scale = 0.01 if args.quick else 1.0
    if args.threads is None:
        # A smoke run's cells cost their process start more than their
        # work: one thread count keeps every backend in it and halves them.
        args.threads = [2] if args.quick else [1, 2]
    if args.repeats < 1 or args.scale <= 0 or any(t < 1 for t in args.threads):
        p.error("--repeats, --scale and --threads must be positive")
    # `bazel run` starts us in the runfiles tree; the user's paths are
    # relative to where they typed the command.
    where = os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd())
    for name in ("json", "plot", "compare", "markdown"):
        if getattr(args, name):
            setattr(args, name, os.path.join(where, getattr(args, name)))
    if args.from_json:
        args.from_json = [os.path.join(where, path) for path in args.from_json]
    args.workloads = args.workloads or ALL_WORKLOADS
    if args.backends and "all" in args.backends:
        args.backends = list(ALL_BACKENDS)
    args.backends = args.backends or [b for b in ALL_BACKENDS if b not in OPT_IN_BACKENDS]
    return args


def format_net_table(rows):
    header = ["workload", "backend", "threads", "median rps", "spread rps",
              "vs asyncio", "2 thr/1 thr", "p50 ms", "p99 ms", "balance / bytes per conn"]
    lines = [header]
    ratios = report.two_over_one(rows, network=True)
    for r in rows:
        idle = r["workload"] == "idle_conns"
        if r.get("error"):
            lines.append([r["workload"], r["backend"], str(r["threads"]), "FAIL",
                          "-", "-", "-", "-", "-", r["error"][:100]])
            continue
        lines.append([
            r["workload"], r["backend"], str(r["threads"]),
            "-" if idle else f"{r['median']:.0f}",
            "-" if idle else f"{r['min']:.0f}-{r['max']:.0f}",
            f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-",
            _two_over_one_cell(ratios, r),
            "-" if idle else f"{r['p50_ms']:.3f}",
            "-" if idle else f"{r['p99_ms']:.3f}",
            f"{r['bytes_per_conn']:.0f} B" if idle else
            "/".join(str(c) for c in r["balance"] or []),
        ])
    return render(lines)


def run_net(args):
    """The network rows: each cell a fresh server process and a fresh load
    process per round. Ratio: rps over stdlib asyncio's (for idle_conns,
    asyncio's bytes per connection over the cell's: above 1 is leaner)."""
    rows = []
    available = net.net_backends()
    workloads_here = [w for w in args.workloads if w in net.NET_WORKLOADS]
    cluster = None
    if any(w in net.DB_WORKLOADS for w in workloads_here):
        reason = net.db_unavailable()
        if reason:
            print(f"\nskipped {', '.join(sorted(net.DB_WORKLOADS))}: {reason}")
            workloads_here = [w for w in workloads_here if w not in net.DB_WORKLOADS]
        else:
            cluster = net.pg_cluster_module().Cluster(net.pg_cluster_module().find_bindir())
            cluster.start()
            os.environ.update(cluster.env())  # The servers' way to it.
    try:
        for workload in workloads_here:
            rows += _net_workload_rows(args, workload, available)
    finally:
        if cluster is not None:
            cluster.stop()
    return rows


def _net_workload_rows(args, workload, available):
    """One network workload's rows, every cell `--repeats` times in rotated order."""
    rows = []
    cells = [(b, t) for b in backends_for(workload, args.backends) if b in available
             for t in ([1] if b in backends.SINGLE_THREADED else args.threads)]
    results, failed = run_rounds(
        cells, args.repeats,
        lambda backend, threads: net.run_net_cell(backend, workload, threads, args.scale))
    idle = workload == "idle_conns"
    key = "bytes_per_conn" if idle else "rps"

    def med(cell, k):
        return statistics.median(x[k] for x in results[cell])

    base = med(("asyncio", 1), key) if results.get(("asyncio", 1)) else None
    for cell in cells:
        if cell in failed:
            rows.append({"workload": workload, "backend": cell[0],
                         "threads": cell[1], "error": failed[cell]})
            continue
        values = [x[key] for x in results[cell]]
        median = statistics.median(values)
        ratio = None
        if base:
            ratio = base / median if idle else median / base
        row = {"workload": workload, "backend": cell[0], "threads": cell[1],
               "median": median, "min": min(values), "max": max(values),
               "values": values, "ratio": ratio,
               "balance": results[cell][-1].get("balance")}
        if idle:
            row["bytes_per_conn"] = median
        else:
            row["p50_ms"] = med(cell, "p50_ms")
            row["p99_ms"] = med(cell, "p99_ms")
        rows.append(row)
    return rows


def _cell_key(row):
    return (row["workload"], row["backend"], row["threads"])


def _number(value):
    return f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"


def format_comparison(old, new):
    """Each cell present in both runs: the old and new medians and the
    change, as speed (above 1 is faster now; rps for network rows, time
    for the others, bytes per connection for idle_conns)."""
    before = {_cell_key(r): r for r in old.get("rows", []) + old.get("net_rows", [])}
    lines = [["workload", "backend", "threads", "old", "new", "change"]]
    for row in new.get("rows", []) + new.get("net_rows", []):
        was = before.get(_cell_key(row))
        if was is None:
            continue
        if row.get("error") or was.get("error"):
            lines.append([*map(str, _cell_key(row)),
                          "FAIL" if was.get("error") else _number(was["median"]),
                          "FAIL" if row.get("error") else _number(row["median"]), "-"])
            continue
        higher_is_better = "p50_ms" in row  # Requests per second.
        speed = (row["median"] / was["median"] if higher_is_better
                 else was["median"] / row["median"])
        lines.append([*map(str, _cell_key(row)), _number(was["median"]),
                      _number(row["median"]), f"{speed:.2f}x"])
    return render(lines)


# Backend names earlier --json files used, and the names they go by now.
_RENAMED_BACKENDS = {"seed": "mt-asyncio-0.3.0a1"}


def load_run(path):
    """A --json file, its backends under today's names."""
    with open(path) as f:
        run = json.load(f)
    for key in ("rows", "net_rows"):
        for row in run.get(key, []):
            row["backend"] = _RENAMED_BACKENDS.get(row["backend"], row["backend"])
    return run


def merge_runs(runs):
    """One run's data from several --json runs (each cell once, the last
    file's copy kept); interpreter facts and arguments of the first."""
    merged = {k: v for k, v in runs[0].items() if k not in ("rows", "net_rows")}
    for key in ("rows", "net_rows"):
        cells = {}
        for run in runs:
            for row in run.get(key, []):
                cells[_cell_key(row)] = row
        merged[key] = list(cells.values())
    merged["gil_stayed_off"] = all(run.get("gil_stayed_off", True) for run in runs)
    stolen = [run["cpu_steal_share"] for run in runs
              if run.get("cpu_steal_share") is not None]
    # The worst run's; unknown if any run did not record it.
    merged["cpu_steal_share"] = max(stolen) if len(stolen) == len(runs) else None
    # The widest range over the runs; no median across runs.
    trips = [run.get("cpu_round_trip") for run in runs]
    if all(trips):
        merged["cpu_round_trip"] = {
            "cpus": trips[0]["cpus"], "min_ns": min(t["min_ns"] for t in trips),
            "median_ns": None, "max_ns": max(t["max_ns"] for t in trips),
            "cells": sum(t["cells"] for t in trips),
            "far_cells": sum(t["far_cells"] for t in trips)}
    else:
        merged["cpu_round_trip"] = None
    return merged


def report_saved(args, data):
    """--plot, --compare and --markdown on results (just measured or read
    back)."""
    if args.compare:
        old = load_run(args.compare)
        print(f"\nchange against {args.compare} (speed: above 1.00x is faster now):")
        print(format_comparison(old, data))
    if args.plot:
        import plots
        written = plots.write_plots(data, args.plot)
        print(f"\nwrote {len(written)} charts into {args.plot}")
    if args.markdown:
        print(f"wrote {report.write_markdown(data, args.markdown)}")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.from_json:
        if not (args.plot or args.compare or args.markdown):
            print("bench: --from-json needs --plot, --compare or --markdown",
                  file=sys.stderr)
            return 2
        report_saved(args, merge_runs([load_run(path) for path in args.from_json]))
        return 0

    facts = interpreter_facts()
    if facts["debug_build"]:
        print("bench: refusing to run on a debug build of CPython", file=sys.stderr)
        return 2
    ext = facts["extension"]
    unoptimized = bool(ext.get("sanitizer")) or not ext.get("optimized", False)
    uses_ext = [b for b in args.backends if b in backends.USES_EXTENSION]
    if unoptimized and uses_ext:
        if not args.allow_unoptimized:
            print("bench: refusing to run with a debug or sanitizer build of "
                  f"mt_asyncio._core ({ext}); use `bazel run` (always -c opt)",
                  file=sys.stderr)
            return 2
        print("bench: WARNING: unoptimized extension; these numbers are not measurements")
    print(f"interpreter: {facts['executable']} (CPython {facts['version']}, "
          f"{'free-threaded' if facts['free_threaded'] else 'GIL build'}, "
          f"GIL {'enabled' if facts['gil_enabled'] else 'disabled'})")
    print(f"cells: {args.repeats} interleaved rounds, each cell a fresh subprocess "
          f"per round (1 warm-up + 1 counted run), scale {args.scale}; "
          f"ratio = asyncio median / cell median")
    print("mt_asyncio rows: mt_asyncio.asyncio, tasks stepped in parallel on the "
          "runtime's workers")

    for backend in list(args.backends):
        reason = backend_unavailable(backend)
        if reason:
            print(f"skipped backend {backend}: {reason}")
            args.backends.remove(backend)

    rows = []
    gil_stayed_off = True
    times_at_start = cpu_times()
    round_trips = []  # Before each CPU cell, in the order they ran.
    for workload in [w for w in args.workloads if w in workloads.WORKLOADS]:
        cells = [(backend, threads) for backend in backends_for(workload, args.backends)
                 if backend in backends.BACKENDS
                 for threads in ([1] if backend in backends.SINGLE_THREADED
                                 else args.threads)]
        def run_cell(backend, threads):
            round_trip = hostcpu.cache_line_round_trip()
            result = spawn_cell(backend, workload, threads, args.scale, args.cell_timeout)
            round_trips.append(round_trip)
            return {**result, "cpu_round_trip_ns": round_trip}

        results, failed = run_rounds(cells, args.repeats, run_cell)
        times = {c: [x["time"] for x in results[c]] for c in cells}
        balance = {c: (results[c][-1]["balance"], results[c][-1]["coroutines"])
                   for c in cells if results[c]}
        profiles = {c: [x["workers"] for x in results[c] if "workers" in x] for c in cells}
        gil_stayed_off &= not any(x["gil_enabled_after"] for c in cells for x in results[c])
        baseline = (statistics.median(times[("asyncio", 1)])
                    if times.get(("asyncio", 1)) else None)
        for backend, threads in cells:
            if (backend, threads) in failed:
                rows.append({"workload": workload, "backend": backend,
                             "threads": threads, "error": failed[(backend, threads)]})
                continue
            t = times[(backend, threads)]
            median = statistics.median(t)
            rows.append({
                "workload": workload, "backend": backend, "threads": threads,
                "median": median, "min": min(t), "max": max(t), "times": t,
                "round_trips_ns": [x["cpu_round_trip_ns"]
                                   for x in results[(backend, threads)]],
                "balance": balance[(backend, threads)][0],
                "coroutines": balance[(backend, threads)][1],
                "ratio": baseline / median if baseline else None,
                **({} if (backend, threads) == ("asyncio", 1)
                   else paired_with(times.get(("asyncio", 1)), t)),
                **({"workers": worker_profile(profiles[(backend, threads)])}
                   if profiles[(backend, threads)] else {}),
            })

    print()
    if rows:
        print(format_table(rows))
    if args.workers and any("workers" in r for r in rows):
        print("\nwhat each mt_asyncio worker did (medians over the rounds):")
        print(format_workers_table(rows))
    net_rows = run_net(args)
    if net_rows:
        print("\nnetwork (server in its own process, load from another; "
              "mt_asyncio threads = runtime workers):")
        print(format_net_table(net_rows))
    if facts["free_threaded"]:
        print(f"\nGIL stayed disabled in every cell: {'yes' if gil_stayed_off else 'NO'}")
    stolen = steal_share(times_at_start, cpu_times())
    if stolen is not None:
        print(f"CPU time stolen by the hypervisor during the run: {stolen:.1%} "
              "(/proc/stat; above a few percent, expect wide spreads)")
    round_trip = hostcpu.summary(round_trips)
    if round_trip is not None:
        print(f"cache-line round trip between CPUs {round_trip['cpus'][0]} and "
              f"{round_trip['cpus'][1]}, before each cell: "
              f"{round_trip['min_ns']:.0f}-{round_trip['max_ns']:.0f} ns "
              f"(median {round_trip['median_ns']:.0f}); {round_trip['far_cells']} of "
              f"{round_trip['cells']} cells ran with it above twice the lowest "
              "(virtual CPUs placed apart: cells whose workers hand work back and "
              "forth slow down)")
    data = {"interpreter": facts, "args": vars(args), "rows": rows,
            "net_rows": net_rows, "gil_stayed_off": gil_stayed_off,
            "cpu_steal_share": stolen, "cpu_round_trip": round_trip,
            "cpus": os.cpu_count()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=2)
        print(f"wrote {args.json}")
    report_saved(args, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
