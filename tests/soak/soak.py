"""The soak: hours of a service's load on mt_asyncio, with nothing lost.

    bazel run //tests/soak -- --duration 600 --workers 4

Starts tests/soak/service.py (mt_asyncio under compat.install(), control
plane on) in a process of its own and drives it from this one (stdlib's
asyncio, aiohttp's client): `--clients` connections at once over HTTP and
the line protocol over TCP, Unix and TLS, every answer checked against
what it must be; clients that disconnect from a slow handler; a resize of
the worker pool through `mtctl scale workers` every `--resize-every`
seconds (between 1 and --workers); at the end, requests in flight and a
coordinated shutdown (`mtctl shutdown --grace 5 --wait`) that must answer
them.

It samples the service's RSS and open descriptors every second and
reports their slopes after the warm-up (a least-squares line, KiB or fds
per minute), the GC runs the service saw, and the service's own counts.
It fails (exit status 1) when a request is lost or wrong, a resize is not
applied, a task is not accounted for (created = ok + cancelled + failed),
a task failed, a timer fired early, the pipeline lost or reordered an item,
a stall was reported, or a slope passes its limit (--max-rss-slope,
--max-fd-slope; both apply to runs of at least --slope-check-after
seconds, since a short run's line is mostly warm-up and noise).
"""

import argparse
import asyncio
import hashlib
import json
import os
import random
import shutil
import ssl
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "control"))
import certs  # noqa: E402 - tests/control/certs.py

import aiohttp  # noqa: E402


def mtctl_path():
    # Under `bazel run` and `bazel test` mtctl sits in the runfiles tree.
    candidate = os.path.join(ROOT, "control", "mtctl")
    return candidate if os.path.exists(candidate) else shutil.which("mtctl")


class Tally:
    def __init__(self):
        self.sent = {}
        self.ok = {}
        self.wrong = []
        self.lost = []  # (kind, error) of requests that got no answer.
        self.disconnects = 0

    def start(self, kind):
        self.sent[kind] = self.sent.get(kind, 0) + 1

    def good(self, kind):
        self.ok[kind] = self.ok.get(kind, 0) + 1

    def bad(self, kind, what):
        self.wrong.append((kind, what))

    def check(self, kind, got, want):
        self.good(kind) if got == want else self.bad(kind, got)

    def total(self, d):
        return sum(d.values())


class Service:
    def __init__(self, args, folder):
        self.folder = folder
        env = dict(os.environ, MT_ASYNCIO_CONTROL="1", XDG_RUNTIME_DIR=folder,
                   PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        env.pop("MTCTL_TARGET", None)
        self.env = env
        self.proc = subprocess.Popen(
            args.service_prefix.split() +
            [sys.executable, os.path.join(HERE, "service.py"), "--threads",
             str(args.workers), "--folder", folder],
            stdout=subprocess.PIPE, stderr=open(os.path.join(folder, "stderr"), "w"),
            text=True, env=env)
        # The service's own pid (from its "ready" line): with --service-prefix
        # the child is the wrapping tool.
        self.pid = self.proc.pid
        self.last_stats = {}
        self.exit = None

    async def read_events(self, ready):
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, self.proc.stdout.readline)
            if not line:
                break
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event["event"] == "ready":
                ready.set_result(event)
            elif event["event"] == "stats":
                self.last_stats = event
            elif event["event"] == "exit":
                self.exit = event
            elif event["event"] == "census":
                print("census:", json.dumps(event), flush=True)
        if not ready.done():
            ready.set_exception(RuntimeError("the service exited before it was ready: " +
                                             self.stderr_tail()))

    def stderr_tail(self):
        with open(os.path.join(self.folder, "stderr")) as f:
            return f.read()[-3000:]

    async def mtctl(self, *argv, timeout=30):
        proc = await asyncio.create_subprocess_exec(
            mtctl_path(), "--target", str(self.pid), *argv,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return 124, "", "timed out"
        return proc.returncode, out.decode(), err.decode()

    def sample(self):
        pid = self.pid
        rss = 0
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1])
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            return None
        return rss, fds


def slope_per_minute(points):
    """Least-squares slope of (seconds, value) points, per minute."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return 60 * sum((t - mx) * (v - my) for t, v in points) / var


# --- clients ---------------------------------------------------------------------

async def http_client(session, base, tally, stop, rng):
    while not stop.is_set():
        pick = rng.random()
        try:
            if pick < 0.35:
                i = rng.randrange(10**6)
                tally.start("http_small")
                async with session.get(f"{base}/small", params={"i": i}) as r:
                    text = await r.text()
                tally.check("http_small", text, f"ok {i}")
            elif pick < 0.5:
                body = rng.randbytes(64 * 1024 if rng.random() < 0.5 else 100)
                tally.start("http_echo")
                async with session.post(f"{base}/echo", data=body) as r:
                    text = await r.text()
                want = f"{hashlib.sha256(body).hexdigest()} {len(body)}"
                tally.check("http_echo", text, want)
            elif pick < 0.6:
                n = rng.randrange(1000, 30000)
                tally.start("http_cpu")
                async with session.get(f"{base}/cpu", params={"n": n}) as r:
                    text = await r.text()
                want = str(sum(k * k for k in range(n)))
                tally.check("http_cpu", text, want)
            elif pick < 0.7:
                tally.start("http_sleep")
                async with session.get(f"{base}/sleep",
                                       params={"ms": rng.randrange(1, 50)}) as r:
                    text = await r.text()
                tally.check("http_sleep", text, "slept")
            elif pick < 0.8:
                d = f"{rng.randrange(10**6)}"
                tally.start("http_thread")
                async with session.get(f"{base}/thread", params={"d": d}) as r:
                    text = await r.text()
                want = hashlib.sha256(d.encode() * 1000).hexdigest()
                tally.check("http_thread", text, want)
            elif pick < 0.83:
                w = f"w{rng.randrange(10**6)}"
                tally.start("http_subprocess")
                async with session.get(f"{base}/subprocess", params={"w": w}) as r:
                    text = await r.text()
                tally.check("http_subprocess", text, f"{w.upper()} 0")
            elif pick < 0.9:
                n = rng.randrange(10, 300)
                tally.start("http_burst")
                async with session.get(f"{base}/burst", params={"n": n}) as r:
                    text = await r.text()
                tally.check("http_burst", text, str(n * (n - 1)))
            else:
                # A client that goes away mid-request: the handler is
                # cancelled on the service's side.
                try:
                    async with asyncio.timeout(rng.uniform(0.01, 0.1)):
                        async with session.get(f"{base}/slow", params={"s": 2}) as r:
                            await r.text()
                except TimeoutError:
                    tally.disconnects += 1
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
            tally.lost.append(("http", repr(e)))


async def line_client(kind, open_conn, tally, stop, rng):
    while not stop.is_set():
        try:
            reader, writer = await open_conn()
        except OSError as e:
            tally.lost.append((kind, f"connect: {e!r}"))
            await asyncio.sleep(0.1)
            continue
        try:
            for _ in range(rng.randrange(1, 50)):
                if stop.is_set():
                    break
                payload = rng.randbytes(rng.choice((8, 200, 8000)))
                ident = str(rng.randrange(10**9)).encode()
                tally.start(kind)
                writer.write(ident + b" " + payload.hex().encode() + b"\n")
                await writer.drain()
                line = await reader.readline()
                want = ident + b" " + hashlib.sha1(payload).hexdigest().encode() + b"\n"
                tally.check(kind, line, want)
        except (OSError, asyncio.IncompleteReadError) as e:
            tally.lost.append((kind, repr(e)))
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass


# --- the run ---------------------------------------------------------------------

async def drive(args, folder):
    svc = Service(args, folder)
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    reader_task = asyncio.create_task(svc.read_events(ready))
    info = await asyncio.wait_for(ready, 60)
    svc.pid = info["pid"]
    deadline = time.monotonic() + 30
    sock = os.path.join(folder, "mt_asyncio", f"{info['pid']}.sock")
    while not os.path.exists(sock):
        if time.monotonic() > deadline:
            raise RuntimeError("the control socket never appeared")
        await asyncio.sleep(0.05)

    tally = Tally()
    stop = asyncio.Event()
    rng = random.Random(args.seed)
    client_tls = ssl.create_default_context(cafile=os.path.join(folder, "ca.pem"))
    # The test CA (tests/control/certs.py) has no keyUsage extension, which
    # the strict X.509 checks of Python >= 3.13 require.
    client_tls.verify_flags &= ~ssl.VERIFY_X509_STRICT
    base = f"http://127.0.0.1:{info['http_port']}"
    connector = aiohttp.TCPConnector(limit=args.clients)
    session = aiohttp.ClientSession(connector=connector,
                                    timeout=aiohttp.ClientTimeout(total=30))
    openers = {
        "tcp": lambda: asyncio.open_connection("127.0.0.1", info["tcp_port"], limit=2**20),
        "unix": lambda: asyncio.open_unix_connection(info["unix_path"], limit=2**20),
        "tls": lambda: asyncio.open_connection("127.0.0.1", info["tls_port"], limit=2**20,
                                               ssl=client_tls, server_hostname="localhost"),
    }
    clients = []
    for i in range(args.clients):
        crng = random.Random(rng.random())
        if i % 2 == 0:
            clients.append(asyncio.create_task(http_client(session, base, tally, stop, crng)))
        else:
            kind = ("tcp", "unix", "tls")[(i // 2) % 3]
            clients.append(asyncio.create_task(
                line_client(kind, openers[kind], tally, stop, crng)))

    samples = []  # (seconds since start, rss KiB, fds)
    resizes = []  # (target, rc, applied)
    started = time.monotonic()
    next_resize = started + args.resize_every
    sizes = [1, args.workers]
    while (now := time.monotonic()) - started < args.duration:
        await asyncio.sleep(1)
        s = svc.sample()
        if s is not None:
            samples.append((now - started, *s))
        if args.resize_every > 0 and now >= next_resize:
            next_resize += args.resize_every
            target = sizes[len(resizes) % 2]
            rc, out, err = await svc.mtctl("scale", "workers", str(target))
            await asyncio.sleep(1.5)  # The next stats line shows it.
            applied = svc.last_stats.get("workers") == target
            resizes.append((target, rc, applied, err.strip()[-200:]))
        if svc.proc.poll() is not None:
            break

    # Requests in flight when the shutdown comes must still be answered:
    # each on a connection of its own, made (and the request sent) before
    # the shutdown stops the server accepting.
    finals = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                   timeout=aiohttp.ClientTimeout(total=30))
    inflight = [asyncio.create_task(finals.get(f"{base}/sleep", params={"ms": 1000}))
                for _ in range(8)]
    await asyncio.sleep(0.3)
    stop.set()
    rc, out, err = await svc.mtctl("shutdown", "--grace", "5", "--wait", timeout=60)
    inflight_ok = 0
    for t in inflight:
        try:
            r = await asyncio.wait_for(t, 30)
            if await r.text() == "slept":
                inflight_ok += 1
        except Exception as e:
            tally.lost.append(("inflight", repr(e)))
    await asyncio.wait_for(asyncio.gather(*clients, return_exceptions=True), 60)
    await session.close()
    await finals.close()
    try:
        await asyncio.wait_for(loop.run_in_executor(None, svc.proc.wait), 60)
    except TimeoutError:
        svc.proc.kill()
    await asyncio.wait_for(reader_task, 30)
    return report(args, svc, tally, samples, resizes, (rc, err), inflight_ok, len(inflight))


def report(args, svc, tally, samples, resizes, shutdown, inflight_ok, inflight_n):
    exit_ = svc.exit or {}
    problems = []
    warm = [p for p in samples if p[0] >= args.warmup]
    rss_slope = slope_per_minute([(t, rss) for t, rss, _ in warm])
    fd_slope = slope_per_minute([(t, fds) for t, _, fds in warm])
    sent, ok = tally.total(tally.sent), tally.total(tally.ok)
    # Line-protocol requests cut off by the shutdown are the connections'
    # end, not a loss: counted apart.
    lost_at_end = sent - ok - len(tally.wrong)
    lines = [
        f"soak: {args.duration:.0f} s at {args.workers} workers, {args.clients} clients",
        f"requests: {sent} sent, {ok} answered and verified, {len(tally.wrong)} wrong, "
        f"{len(tally.lost)} failed with an error, {tally.disconnects} client disconnects",
        "  by kind: " + ", ".join(f"{k} {tally.ok.get(k, 0)}/{v}"
                                 for k, v in sorted(tally.sent.items())),
        f"resizes: {sum(1 for r in resizes if r[1] == 0 and r[2])}/{len(resizes)} applied",
        f"shutdown: mtctl rc {shutdown[0]}, {inflight_ok}/{inflight_n} in-flight answered",
        f"service: tasks created {exit_.get('tasks_created', 0)}, ok {exit_.get('tasks_ok', 0)}, "
        f"cancelled {exit_.get('tasks_cancelled', 0)}, failed {exit_.get('tasks_failed', 0)} "
        f"{exit_.get('failures')}; slow handlers cancelled "
        f"{exit_.get('http_slow_cancelled', 0)}; pipeline {exit_.get('pipeline_items')} "
        f"items; timers {exit_.get('timers_fired')} ({exit_.get('timers_early', 0)} early); "
        f"GC runs {exit_.get('gc_runs')}; stalls {svc.last_stats.get('stalls')}",
    ]
    if warm:
        lines.append(
            f"memory: RSS {samples[0][1] / 1024:.1f} -> {samples[-1][1] / 1024:.1f} MiB "
            f"(peak {max(s[1] for s in samples) / 1024:.1f}); after {args.warmup:.0f} s "
            f"warm-up: RSS slope {rss_slope:.1f} KiB/min, fd slope {fd_slope:.2f}/min "
            f"(fds {warm[0][2]} -> {warm[-1][2]})")
        # RSS each minute: a slope that comes from growth early in the run
        # (allocator pools filling) reads differently from a steady climb.
        lines.append("  RSS by minute (MiB): " + " ".join(
            f"{s[1] / 1024:.0f}" for s in samples[::60]))
    if tally.wrong:
        problems.append(f"{len(tally.wrong)} wrong answers, e.g. {tally.wrong[:3]}")
    if tally.lost:
        problems.append(f"{len(tally.lost)} requests failed, e.g. {tally.lost[:3]}")
    if lost_at_end - len(tally.lost) > 0:
        problems.append(f"{lost_at_end - len(tally.lost)} requests never answered")
    bad_resizes = [r for r in resizes if r[1] != 0 or not r[2]]
    if bad_resizes:
        problems.append(f"resizes not applied: {bad_resizes[:3]}")
    if shutdown[0] != 0:
        problems.append(f"mtctl shutdown failed: {shutdown}")
    if inflight_ok != inflight_n:
        problems.append(f"{inflight_n - inflight_ok} in-flight requests lost at shutdown")
    if not exit_:
        problems.append("the service reported no exit: " + svc.stderr_tail())
    else:
        created = exit_.get("tasks_created", 0)
        ended = sum(exit_.get(k, 0) for k in ("tasks_ok", "tasks_cancelled", "tasks_failed"))
        if created != ended:
            problems.append(f"tasks not accounted for: created {created}, ended {ended}")
        if exit_.get("tasks_failed"):
            problems.append(f"tasks failed: {exit_.get('failures')}")
        for key in ("timers_early", "pipeline_wrong", "bursts_wrong"):
            if exit_.get(key):
                problems.append(f"{key}: {exit_[key]}")
    if svc.last_stats.get("stalls"):
        problems.append(f"{svc.last_stats['stalls']} stalls reported")
    if args.duration >= args.slope_check_after and rss_slope > args.max_rss_slope:
        problems.append(f"RSS slope {rss_slope:.1f} KiB/min > {args.max_rss_slope}")
    if args.duration >= args.slope_check_after and abs(fd_slope) > args.max_fd_slope:
        problems.append(f"fd slope {fd_slope:.2f}/min > {args.max_fd_slope}")
    print("\n".join(lines))
    print(json.dumps({"requests": sent, "answered": ok, "wrong": len(tally.wrong),
                      "failed": len(tally.lost), "rss_slope_kib_min": round(rss_slope, 1),
                      "fd_slope_min": round(fd_slope, 2), "service": exit_}))
    for p in problems:
        print("PROBLEM:", p)
    print("soak:", "passed" if not problems else "FAILED")
    return 0 if not problems else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--clients", type=int, default=24)
    parser.add_argument("--resize-every", type=float, default=15)
    parser.add_argument("--warmup", type=float, default=60)
    parser.add_argument("--max-rss-slope", type=float, default=256, help="KiB/min")
    parser.add_argument("--slope-check-after", type=float, default=600,
                        help="apply the slope limits to runs at least this long (s)")
    parser.add_argument("--max-fd-slope", type=float, default=2, help="fds/min")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--service-prefix", default="",
                        help="a command the service runs under, e.g. 'heaptrack -o /tmp/ht'")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="mtsoak-", dir="/tmp")
    try:
        why = certs.make(folder)
        if why is not None:
            print("soak: cannot make TLS certificates:", why)
            return 1
        return asyncio.run(drive(args, folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
