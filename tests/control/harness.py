"""A live service for the control plane's end-to-end suites: a
service_app.py process with the control plane served from its
environment, its event stream, and mtctl aimed at it."""

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "service_app.py")
MTCTL = os.path.join(os.environ.get("TEST_SRCDIR", ""), "mt_asyncio", "control", "mtctl")
WAIT = 30


class Service:
    """A service_app.py process and its event stream."""

    def __init__(self, *args, threads=2, env=None):
        # A short private runtime folder: the socket path must fit 107 bytes.
        self.runtime_dir = tempfile.mkdtemp(prefix="mtsvc-", dir="/tmp")
        self.env = dict(os.environ, MT_ASYNCIO_CONTROL="1",
                        XDG_RUNTIME_DIR=self.runtime_dir,
                        PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **(env or {}))
        self.env.pop("MTCTL_TARGET", None)
        self.proc = subprocess.Popen(
            [sys.executable, APP, "--threads", str(threads), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
            env=self.env)
        self.events = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()
        ready = self.wait_for("ready")
        self.pid = ready["pid"]
        self.port = ready["port"]
        self.control_tcp_port = ready["control_tcp_port"]
        self.health_port = ready["health_port"]
        self.socket = os.path.join(self.runtime_dir, "mt_asyncio", f"{self.pid}.sock")
        deadline = time.monotonic() + WAIT
        while not os.path.exists(self.socket):
            assert time.monotonic() < deadline, "the control socket never appeared"
            time.sleep(0.01)

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.events.put(json.loads(line))
            except ValueError:
                self.events.put({"event": "text", "line": line})
        self.events.put({"event": "eof"})

    def _read_err(self):
        for line in self.proc.stderr:
            self.stderr.append(line)

    def wait_for(self, name, timeout=WAIT):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no {name!r} event; stderr: {''.join(self.stderr)[-2000:]}"
            event = self.events.get(timeout=left)
            if event["event"] == name:
                return event
            assert event["event"] != "eof", f"exited before {name!r}: {''.join(self.stderr)}"

    def mtctl(self, *args, check=True, target=True, timeout=WAIT):
        argv = [MTCTL, *(("--target", str(self.pid)) if target else ()), *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=self.env)
        if check:
            assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc

    def json(self, *args):
        return json.loads(self.mtctl("-o", "json", *args).stdout)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(WAIT)
        shutil.rmtree(self.runtime_dir, ignore_errors=True)


def tls_files():
    """A generator for a module-scoped pytest fixture: a folder with the
    test CA, certificates and tokens of certs.make() (the test is skipped
    when they cannot be made)."""
    import pytest

    import certs
    folder = tempfile.mkdtemp(prefix="mtcerts-", dir="/tmp")
    try:
        why = certs.make(folder)
        if why:
            pytest.skip(why)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def tls_env(tls_files):
    """The environment that serves TLS on a free port of 127.0.0.1 with
    the certificate, key and both tokens of tls_files."""
    return {
        "MT_ASYNCIO_CONTROL_TCP": "127.0.0.1:0",
        "MT_ASYNCIO_CONTROL_TLS_CERT": os.path.join(tls_files, "server.pem"),
        "MT_ASYNCIO_CONTROL_TLS_KEY": os.path.join(tls_files, "server.key"),
        "MT_ASYNCIO_CONTROL_TOKEN_FILE": os.path.join(tls_files, "admin.token"),
        "MT_ASYNCIO_CONTROL_READONLY_TOKEN_FILE": os.path.join(tls_files, "readonly.token"),
    }


def tls_service(tls_files):
    """A generator for a pytest fixture: a Service that also serves TLS
    (tls_env)."""
    svc = Service(env=tls_env(tls_files))
    try:
        assert svc.control_tcp_port, "the TCP listener did not start: " + "".join(svc.stderr)
        yield svc
    finally:
        svc.close()


def go_tool_path(name, env_var):
    """A Go tool tools/setup.sh builds into ~/.cache/mt_asyncio/bin when Go
    is present ($env_var names another), or None."""
    import pwd
    explicit = os.environ.get(env_var)
    if explicit:
        return explicit
    home = pwd.getpwuid(os.getuid()).pw_dir  # HOME may be moved by the runner.
    path = os.path.join(home, ".cache", "mt_asyncio", "bin", name)
    return path if os.access(path, os.X_OK) else shutil.which(name)


def grpc_health_probe_path():
    """grpc-health-probe (github.com/grpc-ecosystem/grpc-health-probe), if
    installed."""
    return go_tool_path("grpc-health-probe", "MT_GRPC_HEALTH_PROBE")


def grpcurl_path():
    """grpcurl, if installed (tools/setup.sh builds it when Go is present)."""
    import pwd
    explicit = os.environ.get("MT_GRPCURL")
    if explicit:
        return explicit
    # tools/setup.sh builds it here (HOME may be moved by the test runner).
    home = pwd.getpwuid(os.getuid()).pw_dir
    path = os.path.join(home, ".cache", "mt_asyncio", "bin", "grpcurl")
    return path if os.access(path, os.X_OK) else shutil.which("grpcurl")


def rss_kib(pid):
    """A process's resident memory in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class TickMeter:
    """The workload's rate, read from a service_app.py --tick-file: the
    service writes (ticks, CLOCK_MONOTONIC ns) there every 20 ms."""

    def __init__(self, path):
        self.path = path

    def read(self):
        """(ticks, seconds) as the service last wrote them."""
        import struct
        deadline = time.monotonic() + WAIT
        while True:
            try:
                with open(self.path, "rb") as f:
                    first, second = f.read(16), None
                    f.seek(0)
                    second = f.read(16)
            except FileNotFoundError:
                first = None
            if first is not None and len(first) == 16 and first == second:
                ticks, ns = struct.unpack("=QQ", first)
                if ns:
                    return ticks, ns / 1e9
            assert time.monotonic() < deadline, "the service never wrote its ticks"
            time.sleep(0.005)

    @staticmethod
    def rate(start, end):
        return (end[0] - start[0]) / (end[1] - start[1])


class Watchman:
    """Watches a live service while it is attacked: its tick rate, an
    admin's call every 250 ms (`probe()`, which raises or returns a
    complaint when the call failed; how long each took), RSS and open
    descriptors. The same probes run while the baseline is measured, so
    their own cost is in both.

    with watchman.attack("name"): ...   measures the attack and keeps the
    figures in watchman.results; check() asserts the bars of the hostile
    suite on all of them."""

    PROBE_EVERY = 0.25

    def __init__(self, svc, meter, probe, min_seconds=3.0):
        self.svc = svc
        self.meter = meter
        self.probe = probe
        self.min_seconds = min_seconds
        self.results = []
        self.baseline_rate = None
        self.baseline_rss = None
        self.baseline_fds = None

    def _probe(self, stop, figures):
        while not stop.is_set():
            start = time.monotonic()
            try:
                complaint = self.probe()
            except Exception as exc:  # noqa: BLE001 - a failed probe is a finding.
                complaint = repr(exc)
            took = time.monotonic() - start
            figures["probes"] += 1
            figures["slowest_probe"] = max(figures["slowest_probe"], took)
            if complaint:
                figures["failed_probes"].append(complaint)
            figures["peak_rss_kib"] = max(figures["peak_rss_kib"], rss_kib(self.svc.pid))
            stop.wait(max(0.0, self.PROBE_EVERY - took))

    def _measure(self, body, seconds):
        figures = {"probes": 0, "slowest_probe": 0.0, "failed_probes": [],
                   "peak_rss_kib": rss_kib(self.svc.pid)}
        stop = threading.Event()
        prober = threading.Thread(target=self._probe, args=(stop, figures), daemon=True)
        start_ticks = self.meter.read()
        started = time.monotonic()
        prober.start()
        try:
            body()
            time.sleep(max(0.0, seconds - (time.monotonic() - started)))
        finally:
            end_ticks = self.meter.read()
            stop.set()
            prober.join(WAIT)
        figures["end_rss_kib"] = rss_kib(self.svc.pid)
        figures["seconds"] = end_ticks[1] - start_ticks[1]
        figures["rate"] = TickMeter.rate(start_ticks, end_ticks)
        return figures

    def baseline(self, seconds=4.0):
        """The undisturbed rate, RSS and descriptors (with the probes on)."""
        figures = self._measure(lambda: None, seconds)
        self.baseline_rate = figures["rate"]
        self.baseline_rss = rss_kib(self.svc.pid)
        self.baseline_fds = len(os.listdir(f"/proc/{self.svc.pid}/fd"))
        print(f"baseline: {self.baseline_rate:.0f} ticks/s, RSS "
              f"{self.baseline_rss / 1024:.1f} MiB, {self.baseline_fds} fds, slowest GetInfo "
              f"{figures['slowest_probe'] * 1000:.0f} ms")
        return figures

    def attack(self, name, run, retry_below=0.9):
        """Runs run() (the attack, on a thread of its own at nice 19, so
        that the attacker's own CPU, on the same two cores as the service,
        weighs as little as it can), measures, and returns the figures.

        A window whose tick rate falls below `retry_below` of the baseline
        is reported and the attack runs again, up to three windows, judged
        on the last: on a shared 2-vCPU VM the host can take that much from
        a window of a few seconds (two such windows in a row, at 89%, were
        seen while a build ran beside the suite). Three misses in a row are the
        service's: an attack that costs the service its ticks costs them
        in every window."""
        figures = self._attack_once(name, run)
        for _ in range(2):
            if figures["ratio"] >= retry_below:
                break
            print(f"{name}: below {retry_below:.0%} of the baseline; once more",
                  flush=True)
            self.results.remove(figures)
            figures = self._attack_once(name, run)
        return figures

    def _attack_once(self, name, run):
        outcome = {}

        def attacker():
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
            try:
                outcome["value"] = run()
            except BaseException as exc:  # noqa: BLE001 - re-raised below.
                outcome["error"] = exc

        def body():
            thread = threading.Thread(target=attacker, daemon=True)
            thread.start()
            thread.join(120)
            assert not thread.is_alive(), f"{name}: the attack did not end"

        figures = self._measure(body, self.min_seconds)
        if "error" in outcome:
            raise outcome["error"]
        figures["name"] = name
        figures["value"] = outcome.get("value")
        figures["ratio"] = figures["rate"] / self.baseline_rate
        self.results.append(figures)
        print(f"{name}: {figures['rate']:.0f} ticks/s ({figures['ratio']:.0%} of the "
              f"baseline) over {figures['seconds']:.1f} s; GetInfo {figures['probes']} "
              f"times, slowest {figures['slowest_probe'] * 1000:.0f} ms, "
              f"{len(figures['failed_probes'])} failed; RSS peak +"
              f"{(figures['peak_rss_kib'] - self.baseline_rss) / 1024:.1f} MiB, +"
              f"{(figures['end_rss_kib'] - self.baseline_rss) / 1024:.1f} at the end",
              flush=True)
        return figures

    def check(self, results=None, min_ratio=0.9, max_probe=1.0, max_rss_mib=64):
        """The bars, on `results` (default: every attack so far): each
        attack kept min_ratio of the tick rate, every GetInfo answered
        within max_probe seconds, RSS within max_rss_mib of the baseline at
        its peak."""
        bad = []
        for f in self.results if results is None else results:
            if f["ratio"] < min_ratio:
                bad.append(f"{f['name']}: tick rate {f['ratio']:.0%} of the baseline")
            if f["failed_probes"]:
                bad.append(f"{f['name']}: GetInfo failed: {f['failed_probes'][:2]}")
            if f["slowest_probe"] > max_probe:
                bad.append(f"{f['name']}: GetInfo took {f['slowest_probe']:.2f} s")
            grown = (f["peak_rss_kib"] - self.baseline_rss) / 1024
            if grown > max_rss_mib:
                bad.append(f"{f['name']}: RSS {grown:.1f} MiB above the baseline")
        assert not bad, "; ".join(bad)

    def settled(self, max_rss_mib=16, timeout=10):
        """After the attackers left: RSS within max_rss_mib of the baseline
        and descriptors back to it, within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            grown = (rss_kib(self.svc.pid) - self.baseline_rss) / 1024
            fds = len(os.listdir(f"/proc/{self.svc.pid}/fd"))
            if grown <= max_rss_mib and fds <= self.baseline_fds:
                return grown, fds
            assert time.monotonic() < deadline, (
                f"after the attacks: RSS {grown:.1f} MiB above the baseline, "
                f"{fds} descriptors (baseline {self.baseline_fds})")
            time.sleep(0.2)
