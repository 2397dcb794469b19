"""PNG charts of a bench run (``--plot DIR``), drawn with matplotlib from
the same rows the tables print:

- ``speed_<family>.png``: each workload of a family, every backend's
  speed against stdlib asyncio (1.0 = asyncio) at its best thread count;
- ``scaling_<workload>.png``: speed against asyncio per thread count, one
  line per backend that takes a thread count;
- ``latency_<workload>.png``: a network workload's p50 and p99 latency
  per backend and thread count.

Failed cells are left out of the pictures (the tables say FAIL and why).
"""

import os

# Workload families (one speed chart each); a workload not listed goes to
# "other".
FAMILIES = {
    "cpu": ["mixed", "mixed_alloc", "fanout_gather", "fanout_taskgroup",
            "queue_pipeline", "semaphore_bounded", "wait_for_overhead"],
    "overhead": ["one_million", "churn", "cancel_heavy", "primitive_ops",
                 "lock_contention", "timer_sleep", "fanout_gather_bare",
                 "fanout_taskgroup_bare"],
    "blocking": ["executor_offload", "block_inline", "block_offload"],
    "network": ["echo_protocol_1k", "echo_streams_1k", "http_cpu", "tls_echo_1k",
                "db_http", "idle_conns"],
    "inproc": ["http_cpu_inproc", "http_inproc_bare", "echo_streams_inproc",
               "tls_echo_inproc", "tls_handshakes_inproc"],
}


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")  # Files only, no display.
    import matplotlib.pyplot as plt
    return plt


def _measured(rows):
    return [r for r in rows if not r.get("error") and r.get("ratio") is not None]


def _family_of(workload):
    for family, members in FAMILIES.items():
        if workload in members:
            return family
    return "other"


def write_plots(data, folder):
    """Writes the charts for a run's JSON (as --json writes it) into
    `folder`; returns the paths written."""
    plt = _pyplot()
    os.makedirs(folder, exist_ok=True)
    rows = _measured(data.get("rows", [])) + _measured(data.get("net_rows", []))
    written = []
    written += _speed_charts(plt, rows, folder)
    written += _scaling_charts(plt, rows, folder)
    written += _latency_charts(plt, _measured(data.get("net_rows", [])), folder)
    return written


def _save(plt, fig, ax, title, path):
    """Title, legend beside the plot, written to `path` (returned)."""
    ax.set_title(title)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _ratio_axes(ax, ticks, labels, ylabel, **label_style):
    """A speed-ratio chart's axes: the 1.0 line (stdlib asyncio), the x
    ticks and their labels, the y label."""
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(list(ticks))
    ax.set_xticklabels(labels, **label_style)
    ax.set_ylabel(ylabel)


def _backends_in(rows):
    seen = []
    for r in rows:
        if r["backend"] not in seen:
            seen.append(r["backend"])
    return seen


def _speed_charts(plt, rows, folder):
    written = []
    by_family = {}
    for r in rows:
        by_family.setdefault(_family_of(r["workload"]), []).append(r)
    for family, members in by_family.items():
        workloads = [w for w in FAMILIES.get(family, []) if any(
            r["workload"] == w for r in members)] or sorted({r["workload"] for r in members})
        backends = _backends_in(members)
        best = {}
        for r in members:
            key = (r["workload"], r["backend"])
            if key not in best or r["ratio"] > best[key]["ratio"]:
                best[key] = r
        fig, ax = plt.subplots(figsize=(max(7, 1.6 * len(workloads) + 2), 4.5))
        width = 0.8 / max(1, len(backends))
        for i, backend in enumerate(backends):
            xs, ys = [], []
            for j, w in enumerate(workloads):
                if (w, backend) in best:
                    xs.append(j + i * width - 0.4 + width / 2)
                    ys.append(best[(w, backend)]["ratio"])
            ax.bar(xs, ys, width, label=backend)
        _ratio_axes(ax, range(len(workloads)), workloads,
                    "speed vs stdlib asyncio (best thread count)",
                    rotation=20, ha="right")
        written.append(_save(plt, fig, ax, f"{family} workloads",
                             os.path.join(folder, f"speed_{family}.png")))
    return written


def _scaling_charts(plt, rows, folder):
    written = []
    for workload in sorted({r["workload"] for r in rows}):
        mine = [r for r in rows if r["workload"] == workload]
        threads = sorted({r["threads"] for r in mine})
        curves = {}
        for backend in _backends_in(mine):
            points = sorted((r["threads"], r["ratio"]) for r in mine
                            if r["backend"] == backend)
            if len(points) >= 2:  # A curve needs two thread counts.
                curves[backend] = points
        if not curves:
            continue
        fig, ax = plt.subplots(figsize=(7.5, 4))
        for backend, points in curves.items():
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                    label=backend)
        ax.set_xscale("log", base=2)
        _ratio_axes(ax, threads, [str(t) for t in threads],
                    "speed vs stdlib asyncio (1 thread)")
        ax.set_xlabel("threads")
        written.append(_save(plt, fig, ax, f"{workload}: thread scaling",
                             os.path.join(folder, f"scaling_{workload}.png")))
    return written


def _latency_charts(plt, net_rows, folder):
    written = []
    for workload in sorted({r["workload"] for r in net_rows if "p50_ms" in r}):
        mine = [r for r in net_rows if r["workload"] == workload and "p50_ms" in r]
        labels = [f"{r['backend']}@{r['threads']}" for r in mine]
        fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(mine)), 4))
        xs = range(len(mine))
        ax.bar([x - 0.2 for x in xs], [r["p50_ms"] for r in mine], 0.4, label="p50")
        ax.bar([x + 0.2 for x in xs], [r["p99_ms"] for r in mine], 0.4, label="p99")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, rotation=30, ha="right")
        ax.set_ylabel("request latency, ms")
        written.append(_save(plt, fig, ax, f"{workload}: latency",
                             os.path.join(folder, f"latency_{workload}.png")))
    return written
