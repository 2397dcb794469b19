"""A/B of two builds of mt_asyncio on the bench's workloads.

Each build is the `pyext` directory of a `bazel build -c opt //pyext:bench`
runfiles tree, copied aside with its links resolved:

    bazel build -c opt //pyext:bench
    cp -rL bazel-bin/pyext/bench.runfiles/mt_asyncio/pyext /tmp/before

then, with the other build in bazel-bin (or copied the same way):

    python3.14t pyext/benchmarks/ab.py --before /tmp/before \\
        --after bazel-bin/pyext/bench.runfiles/mt_asyncio/pyext \\
        --rounds 7 --scale 0.5 --threads 1,2 one_million mixed

Every cell is a fresh process that imports one build's mt_asyncio and
runs the workload once to warm up and once timed; the two builds
alternate which goes first in each round, so drift on a shared machine
lands on both. ``--after-scrape HZ`` scrapes the after cells' metrics
endpoint HZ times a second (give one build twice to measure the scrape).
Prints a Markdown row per workload and worker count:
medians (seconds), their ratio, each build's range, and the median share
of the timed run's wall time each build's workers spent busy (the
runtime's per-worker counters, summed over the workers: 2.00 is two
workers busy all the time). Each cell first times the cache-line round
trip between the first two CPUs (where the build has the probe;
hostcpu.py): the row gives its range and how many cells
ran with it above twice the row's lowest. The host can move the vCPUs
apart for minutes, and a row whose cells ran in both placements compares
nothing for multi-worker workloads by its medians: the last two columns
compare the builds round by round instead, over the rounds whose two
cells both ran close (both within twice the row's lowest) and over those
whose two both ran apart: the median of after/before, and in how many of
those rounds after was faster.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import hostcpu

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))

# The bench's own cell (one warm-up, one timed run) on one build. With
# `scrape` > 0 the process serves mt_asyncio.metrics and a thread of its
# own fetches the page that many times a second throughout, as a
# Prometheus server would (the fetch is a bare socket request: what is
# measured is the serving side's cost).
CHILD = r"""
import json, socket, sys, threading, time
sys.path[:0] = [{build!r}, {bench!r}]
import cell, hostcpu
trip = hostcpu.cache_line_round_trip()
stop = threading.Event()
scrapes = [0]
if {scrape!r} > 0:
    from mt_asyncio import metrics
    server = metrics.serve(0)
    def scraper():
        while not stop.wait(1 / {scrape!r}):
            with socket.create_connection((server.host, server.port), timeout=30) as s:
                s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                while s.recv(65536):
                    pass
            scrapes[0] += 1
    threading.Thread(target=scraper, daemon=True).start()
result = cell.run_cell("mt_asyncio", {workload!r}, {threads}, {scale!r})
stop.set()
busy = sum(w["busy_ns"] / 1e9 / w["elapsed"] for w in result["workers"])
print(json.dumps([result["time"], busy, trip]))
"""


def run_cell(build, workload, threads, scale, scrape=0):
    code = CHILD.format(build=build, bench=BENCH_DIR, workload=workload,
                        scale=scale, threads=threads, scrape=scrape)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"{workload} on {build} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _trip_range(trips):
    """The row's round trips as 'low–high | cells above twice the low'."""
    trip = hostcpu.summary(trips)
    if trip is None:
        return "— | —"
    return (f"{trip['min_ns']:.0f}–{trip['max_ns']:.0f} "
            f"| {trip['far_cells']} of {trip['cells']}")


def _paired_by_placement(pairs, far):
    """'ratio (after faster in k of n)' over the rounds whose two cells
    both ran apart (`far`) or both close; '—' when there is none."""
    placed = hostcpu.apart([t for p in pairs for t in (p[2], p[3])])
    chosen = [(b, a) for (b, a, _, _), pb, pa in zip(pairs, placed[0::2], placed[1::2])
              if pb is far and pa is far]
    if not chosen:
        return "—"
    ratio = statistics.median(a / b for b, a in chosen)
    faster = sum(a < b for b, a in chosen)
    return f"{ratio:.3f} ({faster} of {len(chosen)})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--scale", type=float, default=0.5)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--after-scrape", type=float, default=0, metavar="HZ",
                        help="the after cells serve mt_asyncio.metrics and are scraped "
                             "HZ times a second (--before and --after may be one build)")
    parser.add_argument("workloads", nargs="+")
    args = parser.parse_args()
    builds = {"before": os.path.abspath(args.before),
              "after": os.path.abspath(args.after)}
    print("| workload | workers | before | after | after/before "
          "| before range | after range | busy before | busy after "
          "| round trip ns | far cells | rounds close | rounds apart |")
    print("|" + " --- |" * 13)
    for workload in args.workloads:
        for threads in (int(t) for t in args.threads.split(",")):
            times = {"before": [], "after": []}
            busy = {"before": [], "after": []}
            pairs = []  # (before s, after s, before trip, after trip) per round
            for r in range(args.rounds):
                order = ("before", "after") if r % 2 == 0 else ("after", "before")
                trip_of = {}
                for name in order:
                    scrape = args.after_scrape if name == "after" else 0
                    took, busy_share, trip = run_cell(builds[name], workload, threads,
                                                      args.scale, scrape)
                    trip_of[name] = trip
                    times[name].append(took)
                    busy[name].append(busy_share)
                pairs.append((times["before"][-1], times["after"][-1],
                              trip_of["before"], trip_of["after"]))
            b = statistics.median(times["before"])
            a = statistics.median(times["after"])
            print(f"| {workload} | {threads} | {b:.3f} | {a:.3f} | {a / b:.2f}× "
                  f"| {min(times['before']):.3f}–{max(times['before']):.3f} "
                  f"| {min(times['after']):.3f}–{max(times['after']):.3f} "
                  f"| {statistics.median(busy['before']):.2f} "
                  f"| {statistics.median(busy['after']):.2f} "
                  f"| {_trip_range([t for p in pairs for t in (p[2], p[3])])} "
                  f"| {_paired_by_placement(pairs, far=False)} "
                  f"| {_paired_by_placement(pairs, far=True)} |",
                  flush=True)


if __name__ == "__main__":
    main()
