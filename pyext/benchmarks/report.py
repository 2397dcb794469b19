"""Markdown tables of a bench run (``--markdown PATH``), for
docs/benchmarks.md: made from the same rows the terminal tables print, so
the report is regenerated from a saved ``--json`` run, never retyped.

Two tables:

- at a glance: one line per workload, one column per backend and thread
  count, each cell the speed against stdlib asyncio (FAIL where the
  backend could not run it, a dash where it was not asked to);
- two threads against one: for each backend that takes a thread count,
  its one-thread median over its two-thread median (above 1: the second
  thread helped);
- every cell: median, spread (min-max), ratio and balance of each
  (workload, backend, threads), with p50/p99 latency for the network rows
  and the failure reason for a FAIL; the CPU rows also say how the cell
  fared against stdlib round by round (the median of the per-round
  ratios, and the rounds it won).
"""

from plots import FAMILIES

# Column order: stdlib first, its peers, the other parallel runtimes, ours.
BACKEND_ORDER = ["asyncio", "asyncio-multiloop", "uvloop", "uvloop-multiloop",
                 "rloop", "rloop-multiloop", "mt-asyncio-0.3.0a1", "tonio", "mt_asyncio",
                 "mt_asyncio+watch"]
SHORT_NAMES = {"asyncio-multiloop": "asyncio×N", "uvloop-multiloop": "uvloop×N",
               "rloop-multiloop": "rloop×N"}


def _order(backend):
    return BACKEND_ORDER.index(backend) if backend in BACKEND_ORDER else len(BACKEND_ORDER)


def _workload_order(rows):
    """Workloads in family order (the charts' grouping), then any other."""
    present = {r["workload"] for r in rows}
    ordered = [w for members in FAMILIES.values() for w in members if w in present]
    return ordered + sorted(present - set(ordered))


def _columns(rows):
    cells = {(r["backend"], r["threads"]) for r in rows}
    return sorted(cells, key=lambda c: (_order(c[0]), c[0], c[1]))


def _ratio_cell(row):
    if row is None:
        return "—"
    if row.get("error"):
        return "FAIL"
    return f"{row['ratio']:.2f}" if row.get("ratio") is not None else "?"


def _table(header, lines):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


def glance_table(rows):
    """Workloads × (backend, threads): speed against stdlib asyncio."""
    columns = _columns(rows)
    by_cell = {(r["workload"], r["backend"], r["threads"]): r for r in rows}
    header = ["workload"] + [f"{SHORT_NAMES.get(b, b)} {t}" for b, t in columns]
    lines = [[w] + [_ratio_cell(by_cell.get((w, b, t))) for b, t in columns]
             for w in _workload_order(rows)]
    return _table(header, lines)


def two_over_one(rows, network):
    """{(workload, backend): speed at two threads over speed at one} for
    every backend measured at both; network rows are rates (rps), the
    others times."""
    medians = {(r["workload"], r["backend"], r["threads"]): r["median"]
               for r in rows if not r.get("error") and r["workload"] != "idle_conns"}
    out = {}
    for (w, b, t), one in medians.items():
        two = medians.get((w, b, 2))
        if t == 1 and two:
            out[(w, b)] = two / one if network else one / two
    return out


def scaling_table(rows, network):
    """Workloads × backends with a thread count: two threads over one."""
    ratios = two_over_one(rows, network)
    backends = sorted({b for _, b in ratios}, key=lambda b: (_order(b), b))
    header = ["workload"] + [SHORT_NAMES.get(b, b) for b in backends]
    lines = [[w] + [f"{ratios[(w, b)]:.2f}" if (w, b) in ratios else "—" for b in backends]
             for w in _workload_order(rows) if any((w, b) in ratios for b in backends)]
    return _table(header, lines)


def _value(x, network):
    if network:
        return f"{x:,.0f}"
    return f"{x:.3f}" if x >= 0.1 else f"{x * 1000:.1f} ms"


def detail_table(rows, network):
    """Every cell: median, spread, ratio, balance (and latency for network
    rows). CPU rows: seconds; network rows: requests per second, or bytes
    per connection for idle_conns."""
    header = ["workload", "backend", "threads",
              "median" if network else "median s", "spread", "vs asyncio"]
    header += ["p50 ms", "p99 ms", "balance"] if network else ["paired (won)", "balance"]
    lines = []
    for w in _workload_order(rows):
        mine = sorted((r for r in rows if r["workload"] == w),
                      key=lambda r: (_order(r["backend"]), r["threads"]))
        for r in mine:
            head = [w, r["backend"], str(r["threads"])]
            if r.get("error"):
                reason = r["error"].replace("|", "\\|").replace("\n", " ")[:160]
                lines.append(head + ["FAIL", reason, "—"] + ["—"] * (3 if network else 2))
                continue
            idle = w == "idle_conns"
            median = (f"{r['median']:,.0f} B/conn" if idle
                      else _value(r["median"], network))
            spread = f"{_value(r['min'], network)}–{_value(r['max'], network)}"
            ratio = f"{r['ratio']:.2f}×" if r.get("ratio") is not None else "—"
            balance = "/".join(str(c) for c in r.get("balance") or []) or "—"
            line = head + [median, spread, ratio]
            if network:
                line += (["—", "—"] if idle
                         else [f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}"])
            else:
                line.append(f"{r['paired_ratio']:.3f} ({r['rounds_won']}/{len(r['times'])})"
                            if r.get("paired_ratio") is not None else "—")
            lines.append(line + [balance])
    return _table(header, lines)


def markdown(data):
    """The report's tables for one run's JSON, as Markdown text."""
    rows, net_rows = data.get("rows", []), data.get("net_rows", [])
    parts = []
    if data.get("cpu_steal_share") is not None:
        parts.append("CPU time stolen by the hypervisor during the run "
                     f"(the worst of the runs merged): {data['cpu_steal_share']:.1%}.")
    trip = data.get("cpu_round_trip")
    if trip:
        parts.append(f"Cache-line round trip between CPUs {trip['cpus'][0]} and "
                     f"{trip['cpus'][1]}, measured before each CPU cell: "
                     f"{trip['min_ns']:.0f}–{trip['max_ns']:.0f} ns; "
                     f"{trip['far_cells']} of {trip['cells']} cells ran with it above "
                     "twice the lowest (virtual CPUs placed apart by the host).")
    if rows:
        parts += ["Speed against stdlib asyncio, CPU and scheduling workloads "
                  "(above 1 is faster):", glance_table(rows)]
    if net_rows:
        parts += ["Network workloads: requests per second against stdlib "
                  "asyncio's (`idle_conns`: asyncio's bytes per connection "
                  "over the cell's; above 1 is better):", glance_table(net_rows)]
    for these, network in ((rows, False), (net_rows, True)):
        if two_over_one(these, network):
            parts += ["Two threads against one, " + ("network" if network else "CPU and scheduling")
                      + " workloads: each backend's speed at two threads over its "
                      "speed at one, in the same run (above 1: the second thread helped):",
                      scaling_table(these, network)]
    if rows:
        parts += ["Every CPU and scheduling cell (seconds):", detail_table(rows, False)]
    if net_rows:
        parts += ["Every network cell (requests per second):",
                  detail_table(net_rows, True)]
    return "\n\n".join(parts) + "\n"


def write_markdown(data, path):
    with open(path, "w") as f:
        f.write(markdown(data))
    return path
