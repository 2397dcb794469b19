"""Where the host put this machine's CPUs, as a benchmark sees it: the
time a cache line takes from one CPU to another and back.

Every hand-over between two workers pays it. On a VM it is where the host
put the virtual CPUs, and it can change under a running guest: on this
project's 2-vCPU VM it sat near 55 ns for minutes, then near 320 ns for
minutes, and two-worker cells whose workers talk all the time
(`echo_streams_inproc`) ran 1.6x slower while it did. bench.py and ab.py
measure it before every cell and report it beside the steal time.
"""

import os
import statistics


def cpu_pair():
    """The first two CPUs this process may run on, or None with fewer."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    return (cpus[0], cpus[1]) if len(cpus) >= 2 else None


def cache_line_round_trip():
    """Nanoseconds a cache line takes between the first two CPUs and back
    (mt_asyncio's native probe), or None where it cannot be measured: one
    CPU, no mt_asyncio, or a build from before the probe."""
    pair = cpu_pair()
    if pair is None:
        return None
    try:
        from mt_asyncio import _core
    except ImportError:
        return None
    probe = getattr(_core, "_cpu_round_trip_ns", None)
    if probe is None:
        return None
    return probe(*pair, rounds=20000, samples=5, budget_seconds=2.0)


def apart(values):
    """For each round trip, whether it is over twice the lowest of
    `values` (the vCPUs placed apart); None where it was not measured."""
    known = [v for v in values if v is not None]
    low = min(known) if known else None
    return [None if v is None else v > 2 * low for v in values]


def summary(values):
    """Round trips measured one per cell: their range and median, and how
    many cells ran with the vCPUs apart. None when none was measured."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    return {"cpus": list(cpu_pair() or ()), "min_ns": min(known),
            "median_ns": statistics.median(known), "max_ns": max(known),
            "cells": len(values), "far_cells": sum(a is True for a in apart(values))}
