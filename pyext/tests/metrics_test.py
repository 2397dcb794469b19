"""mt_asyncio.metrics: what the endpoint serves parses with the Prometheus
project's own parsers (both text formats), every family has the name and
type docs/metrics.md gives it, and a scrape of a busy service reads values
that move."""

import http.client
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client import parser as prometheus_parser

import mt_asyncio
import mt_asyncio.asyncio as asyncio
from mt_asyncio import metrics

WAIT = 30  # Every wait in this module is bounded.

# Every family the endpoint serves, with its type (docs/metrics.md).
FAMILIES = {
    "mt_asyncio_runtime_info": "gauge",
    "mt_asyncio_runtime_uptime_seconds": "gauge",
    "mt_asyncio_workers_target": "gauge",
    "mt_asyncio_workers_live": "gauge",
    "mt_asyncio_workers_searching": "gauge",
    "mt_asyncio_workers_parked": "gauge",
    "mt_asyncio_injector_queue_depth": "gauge",
    "mt_asyncio_units_in_flight": "gauge",
    "mt_asyncio_timers_pending": "gauge",
    "mt_asyncio_reactor_fds": "gauge",
    "mt_asyncio_transports_open": "gauge",
    "mt_asyncio_stalls": "counter",
    "mt_asyncio_worker_busy_seconds": "counter",
    "mt_asyncio_worker_polls": "counter",
    "mt_asyncio_worker_steals": "counter",
    "mt_asyncio_worker_stolen_units": "counter",
    "mt_asyncio_worker_parks": "counter",
    "mt_asyncio_worker_reactor_polls": "counter",
    "mt_asyncio_worker_overflows": "counter",
    "mt_asyncio_worker_local_queue_depth": "gauge",
    "mt_asyncio_blocking_threads": "gauge",
    "mt_asyncio_blocking_threads_idle": "gauge",
    "mt_asyncio_blocking_threads_max": "gauge",
    "mt_asyncio_blocking_queue_depth": "gauge",
    "mt_asyncio_blocking_jobs_completed": "counter",
    "mt_asyncio_blocking_jobs_cancelled": "counter",
    "mt_asyncio_blocking_jobs_abandoned": "counter",
    "mt_asyncio_loops": "gauge",
    "mt_asyncio_tasks_live": "gauge",
    "mt_asyncio_tasks": "gauge",
    "mt_asyncio_tasks_created": "counter",
    "mt_asyncio_slow_steps": "counter",
    "mt_asyncio_task_step_duration_seconds": "histogram",
    "mt_asyncio_task_schedule_delay_seconds": "histogram",
}


def scrape(server, openmetrics=True):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=WAIT)
    try:
        headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
        conn.request("GET", "/metrics", headers=headers)
        response = conn.getresponse()
        body = response.read().decode("utf-8")
        return response.status, response.getheader("Content-Type"), body
    finally:
        conn.close()


def families(text, openmetrics=True):
    parse = (openmetrics_parser.text_string_to_metric_families if openmetrics
             else prometheus_parser.text_string_to_metric_families)
    return {f.name: f for f in parse(text)}


def sample(family, name, **labels):
    for s in family.samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError((name, labels))


@pytest.fixture
def server():
    with metrics.serve(0) as srv:
        yield srv


def test_both_formats_parse_with_every_name_and_type(server):
    asyncio.run(asyncio.sleep(0), threads=2)  # The runtime is up.
    status, content_type, text = scrape(server)
    assert status == 200
    assert content_type.startswith("application/openmetrics-text")
    assert text.endswith("# EOF\n")
    parsed = families(text)
    assert {name: f.type for name, f in parsed.items()} == FAMILIES

    status, content_type, text = scrape(server, openmetrics=False)
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    parsed = families(text, openmetrics=False)
    for name, kind in FAMILIES.items():
        assert parsed[name].type == kind, name
    # Counters carry _total in both formats.
    assert sample(parsed["mt_asyncio_worker_polls"], "mt_asyncio_worker_polls_total",
                  worker="0") >= 0


def test_histograms_are_cumulative_with_fixed_bounds(server):
    asyncio.run(asyncio.sleep(0), threads=2)
    first = families(scrape(server)[2])
    second = families(scrape(server)[2])
    for name in ("mt_asyncio_task_step_duration_seconds",
                 "mt_asyncio_task_schedule_delay_seconds"):
        buckets = [s for s in first[name].samples if s.name == name + "_bucket"]
        bounds = [s.labels["le"] for s in buckets]
        assert bounds[-1] == "+Inf" and len(bounds) == 28
        values = [s.value for s in buckets]
        assert values == sorted(values)  # Cumulative.
        assert values[-1] == sample(first[name], name + "_count")
        assert bounds == [s.labels["le"] for s in second[name].samples
                          if s.name == name + "_bucket"]


def test_a_scrape_of_a_busy_service_reads_values_that_move(server):
    """A service stepping tasks on two workers, scraped while it runs: the
    step counts, polls and busy time grow, the live tasks show by state,
    and the task's wait on a slow step shows in the step histogram."""
    readings = []
    stop = threading.Event()

    def scraper():
        while not stop.is_set():
            readings.append(families(scrape(server)[2]))
            time.sleep(0.2)

    async def main():
        loop = asyncio.get_running_loop()
        thread = threading.Thread(target=scraper)
        thread.start()
        try:
            async def chatter():
                while not stop.is_set():
                    await asyncio.sleep(0)

            async def sleeper():
                await asyncio.sleep(WAIT)

            async def slow_step():
                end = time.monotonic() + 0.05  # One step of 50 ms.
                while time.monotonic() < end:
                    pass

            sleepers = [loop.create_task(sleeper()) for _ in range(50)]
            chatters = [loop.create_task(chatter()) for _ in range(4)]
            await slow_step()
            await asyncio.sleep(1.0)
            stop.set()
            await asyncio.gather(*chatters)
            for t in sleepers:
                t.cancel()
            await asyncio.gather(*sleepers, return_exceptions=True)
        finally:
            stop.set()
            await asyncio.to_thread(thread.join, WAIT)

    asyncio.run(main(), threads=2)
    assert len(readings) >= 3
    first, last = readings[0], readings[-1]

    def total(f, name):
        return sum(s.value for s in f[name].samples if s.name == name + "_total")

    assert total(last, "mt_asyncio_worker_polls") > total(first, "mt_asyncio_worker_polls")
    assert total(last, "mt_asyncio_worker_busy_seconds") > total(first, "mt_asyncio_worker_busy_seconds")
    step = "mt_asyncio_task_step_duration_seconds"
    assert sample(last[step], step + "_count") > sample(first[step], step + "_count")
    # The 50 ms step: in the bucket up to 2^26 ns (67 ms), not below 2^25 ns.
    over_33ms = (sample(last[step], step + "_count")
                 - sample(last[step], step + "_bucket", le=repr(2**25 / 1e9)))
    assert over_33ms >= 1
    # While it ran, the sleepers waited: some reading shows them.
    waiting = [sum(s.value for s in r["mt_asyncio_tasks"].samples
                   if s.labels["state"] == "waiting") for r in readings]
    assert max(waiting) >= 50
    assert sample(last["mt_asyncio_workers_live"], "mt_asyncio_workers_live") >= 2


def test_open_transports_are_counted_by_kind(server):
    """Connections and datagram endpoints show while open and leave the
    gauge when closed."""

    def open_now():
        page = families(scrape(server)[2])["mt_asyncio_transports_open"]
        return {s.labels["kind"]: s.value for s in page.samples}

    async def main():
        loop = asyncio.get_running_loop()
        before = await asyncio.to_thread(open_now)
        server_side = []

        async def accept(reader, writer):
            server_side.append(writer)

        listener = await asyncio.start_server(accept, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        clients = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        endpoint, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
        while len(server_side) < 3:
            await asyncio.sleep(0.01)
        during = await asyncio.to_thread(open_now)
        for _, writer in clients:
            writer.close()
        for writer in server_side:
            writer.close()
        endpoint.close()
        listener.close()
        await listener.wait_closed()
        deadline = time.monotonic() + WAIT
        after = await asyncio.to_thread(open_now)
        while after != before and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            after = await asyncio.to_thread(open_now)
        return before, during, after

    before, during, after = asyncio.run(main(), threads=2)
    assert during["stream"] == before["stream"] + 6  # Both ends of 3 connections.
    assert during["datagram"] == before["datagram"] + 1
    assert after == before


def test_a_busy_loop_is_not_walked_but_counted(server, monkeypatch):
    """Past MAX_TASKS_WALKED live tasks a scrape gives the live count and
    leaves the split by state out, rather than hold the registry."""
    monkeypatch.setattr(metrics, "MAX_TASKS_WALKED", 10)

    async def main():
        ev = asyncio.Event()
        tasks = [asyncio.create_task(ev.wait()) for _ in range(50)]
        await asyncio.sleep(0.05)
        page = families(metrics.render())
        ev.set()
        await asyncio.gather(*tasks)
        return page

    page = asyncio.run(main(), threads=2)
    live = [s.value for s in page["mt_asyncio_tasks_live"].samples]
    assert live and max(live) >= 50
    assert page["mt_asyncio_tasks"].samples == []


def test_unix_socket_and_unknown_paths():
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "metrics.sock")
        with metrics.serve(path=path) as srv:
            assert oct(os.stat(path).st_mode & 0o777) == "0o600"
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(WAIT)
                s.connect(path)
                s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.0 200")
            assert "mt_asyncio_workers_live" in families(body.decode(), openmetrics=False)
        assert not os.path.exists(path)
    with metrics.serve(0) as srv:
        conn = http.client.HTTPConnection(srv.host, srv.port, timeout=WAIT)
        conn.request("GET", "/control")
        assert conn.getresponse().status == 404
        conn.close()


def test_a_silent_connection_does_not_hold_the_endpoint(server):
    """Connections that send nothing are given up after the handler's
    timeout; a scrape behind them is answered."""
    silent = [socket.create_connection((server.host, server.port)) for _ in range(2)]
    try:
        start = time.monotonic()
        assert scrape(server)[0] == 200
        assert time.monotonic() - start < 3 * metrics._Handler.timeout + 5
    finally:
        for s in silent:
            s.close()


@pytest.mark.parametrize("value,expected", [
    ("1", {}), ("on", {}), ("9100", {"port": 9100}),
    ("0.0.0.0:9100", {"host": "0.0.0.0", "port": 9100}),
    ("[::1]:9100", {"host": "::1", "port": 9100}),
    ("/run/m.sock", {"path": "/run/m.sock"}), ("0", None), ("off", None), ("", None),
])
def test_environment_values(value, expected):
    assert metrics._address_from_env(value) == expected


@pytest.mark.parametrize("value", ["metrics.sock", "host:", ":", "99999", "yes please"])
def test_environment_typos_are_refused(value):
    with pytest.raises(ValueError):
        metrics._address_from_env(value)


def test_environment_switch_serves_on_import():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "import http.client, mt_asyncio\n"
        f"c = http.client.HTTPConnection('127.0.0.1', {port}, timeout={WAIT})\n"
        "c.request('GET', '/metrics')\n"
        "r = c.getresponse()\n"
        "print(r.status, b'mt_asyncio_workers_live' in r.read())\n"
    )
    env = dict(os.environ, MT_ASYNCIO_METRICS=f"127.0.0.1:{port}")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=WAIT)
    assert out.stdout.strip() == "200 True", out.stderr
    env["MT_ASYNCIO_METRICS"] = "metrics.sock"
    out = subprocess.run([sys.executable, "-c", "import mt_asyncio"], env=env,
                         capture_output=True, text=True, timeout=WAIT)
    assert "metrics not served" in out.stderr
