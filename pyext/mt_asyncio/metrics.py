"""mt_asyncio's runtime metrics for Prometheus and OpenMetrics scrapers.

``render()`` gives the metrics of this process as text; ``serve()``
answers them over HTTP on a port or a Unix socket of their own, apart
from the control plane, so a scraper needs no token and reaches nothing
else. ``MT_ASYNCIO_METRICS`` in a service's environment serves them when
mt_asyncio is imported: ``1`` (``127.0.0.1:9464``), a port, ``HOST:PORT``
or an absolute socket path; ``0`` or unset serves nothing.

Names follow Prometheus' conventions (and those of Go's and
tokio-metrics' runtime metrics): ``mt_asyncio_`` first, base units
(seconds), ``_total`` on counters. docs/metrics.md lists every one.

Everything is read without stopping a worker, so the counters of two
workers may be a few units apart. Counters and histograms count from the
start of the process (they never go back); gauges are what is true now.
"""

import http.server
import os
import socket
import socketserver
import sys
import threading

from . import _admin, _core

__all__ = ["render", "serve", "MetricsServer", "OPENMETRICS_CONTENT_TYPE",
           "PROMETHEUS_CONTENT_TYPE"]

OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_ENV = "MT_ASYNCIO_METRICS"
_ENV_ON = {"1", "true", "yes", "on"}
_ENV_OFF = {"", "0", "false", "no", "off"}
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9464  # Prometheus' registry of default exporter ports.

# Per-loop series are kept for this many loops (the lowest ids); a
# program that makes loops without end still answers a bounded page.
MAX_LOOPS = 64
# The split of tasks by state walks a loop's task registry, holding each
# shard of it while it counts (about 8 ms per 200,000 tasks); a scrape
# walks at most this many tasks in all. Loops beyond it show their live
# count only (mt_asyncio_tasks_live), so a scrape never holds a busy
# loop's registry for long.
MAX_TASKS_WALKED = 100_000


class _Page:
    """One exposition being written: families in order, each with its
    TYPE, UNIT and HELP once, in either text format."""

    def __init__(self, openmetrics):
        self._openmetrics = openmetrics
        self._lines = []

    def family(self, name, kind, help_text, samples, unit=None):
        """`samples`: (suffix, labels dict, value) for each sample; the
        suffix is "" or "_total", "_bucket", "_count", "_sum". A family
        with no samples (no open loop) still says its type and help."""
        # OpenMetrics names a counter's family without _total, the 0.0.4
        # format with it (its samples carry _total in both).
        family = name
        if kind == "counter" and not self._openmetrics:
            family = name + "_total"
        self._lines.append(f"# TYPE {family} {kind}")
        if unit and self._openmetrics:
            self._lines.append(f"# UNIT {family} {unit}")
        self._lines.append(f"# HELP {family} {help_text}")
        for suffix, labels, value in samples:
            self._lines.append(f"{name}{suffix}{_labels(labels)} {_number(value)}")

    def text(self):
        if self._openmetrics:
            self._lines.append("# EOF")
        return "\n".join(self._lines) + "\n"


def _labels(labels):
    if not labels:
        return ""
    inner = ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items())
    return "{" + inner + "}"


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if value == float("inf"):
        return "+Inf"
    return repr(float(value))


def _gauge(page, name, help_text, value, unit=None):
    page.family(name, "gauge", help_text, [("", {}, value)], unit)


def _counter(page, name, help_text, value, unit=None):
    page.family(name, "counter", help_text, [("_total", {}, value)], unit)


def _histogram(page, name, help_text, histogram):
    bounds, counts, total_seconds = histogram
    samples = []
    cumulative = 0
    for bound, count in zip(bounds, counts):
        cumulative += count
        samples.append(("_bucket", {"le": _number(bound)}, cumulative))
    cumulative += counts[-1]
    samples.append(("_bucket", {"le": "+Inf"}, cumulative))
    samples.append(("_count", {}, cumulative))
    samples.append(("_sum", {}, total_seconds))
    page.family(name, "histogram", help_text, samples, "seconds")


def _runtime(page, info):
    page.family("mt_asyncio_runtime_info", "gauge", "The runtime's state as a label; always 1.",
                [("", {"state": info.get("state", "unknown")}, 1)])
    _gauge(page, "mt_asyncio_runtime_uptime_seconds",
           "Seconds since the runtime started.", float(info.get("uptime_seconds", 0.0)), "seconds")
    config = info.get("config", {})
    _gauge(page, "mt_asyncio_workers_target",
           "Worker threads the pool is sized to (threads=, ResizeWorkers).",
           int(config.get("worker_threads", 0)))
    _gauge(page, "mt_asyncio_workers_live", "Worker threads running now.",
           int(info.get("live_workers", 0)))
    _gauge(page, "mt_asyncio_workers_searching", "Workers stealing work from others now.",
           int(info.get("searching_workers", 0)))
    _gauge(page, "mt_asyncio_workers_parked", "Workers asleep for want of work now.",
           int(info.get("parked_workers", 0)))
    _gauge(page, "mt_asyncio_injector_queue_depth",
           "Units queued on the shared queue (woken from outside the workers).",
           int(info.get("injector_depth", 0)))
    _gauge(page, "mt_asyncio_units_in_flight",
           "Runtime units (task steppers, strands, callbacks) spawned and not finished.",
           int(info.get("tasks_in_flight", 0)))
    _gauge(page, "mt_asyncio_timers_pending", "Timers armed and not yet fired.",
           int(info.get("timers_pending", 0)))
    _gauge(page, "mt_asyncio_reactor_fds", "File descriptors registered with the reactor.",
           int(info.get("fds_registered", 0)))
    stream, datagram = _core._transports_open()
    page.family("mt_asyncio_transports_open", "gauge",
                "Socket transports open now: stream (TCP and Unix connections, TLS "
                "included) and datagram (UDP and Unix datagram endpoints).",
                [("", {"kind": "stream"}, stream), ("", {"kind": "datagram"}, datagram)])
    _counter(page, "mt_asyncio_stalls",
             "Units seen holding a worker longer than the stall threshold.",
             int(info.get("stalls_detected", 0)))

    workers = info.get("workers", [])
    per_worker = [
        ("mt_asyncio_worker_busy_seconds", "counter", "seconds",
         "Time the worker spent out of park (running units or looking for them).",
         lambda w: int(w.get("busy_ns", 0)) / 1e9),
        ("mt_asyncio_worker_polls", "counter", None,
         "Units the worker ran (task steps, strand polls, callbacks).",
         lambda w: int(w.get("units_run", 0))),
        ("mt_asyncio_worker_steals", "counter", None,
         "Batches of units the worker stole from another worker's queue.",
         lambda w: int(w.get("steals", 0))),
        ("mt_asyncio_worker_stolen_units", "counter", None,
         "Units in the batches the worker stole.",
         lambda w: int(w.get("stolen_units", 0))),
        ("mt_asyncio_worker_parks", "counter", None,
         "Times the worker went to sleep for want of work.",
         lambda w: int(w.get("parks", 0))),
        ("mt_asyncio_worker_reactor_polls", "counter", None,
         "Times the worker drove the reactor (epoll) while parked.",
         lambda w: int(w.get("reactor_polls", 0))),
        ("mt_asyncio_worker_overflows", "counter", None,
         "Times the worker's local queue spilled half its units to the shared queue.",
         lambda w: int(w.get("overflows", 0))),
        ("mt_asyncio_worker_local_queue_depth", "gauge", None,
         "Units queued on the worker's own queue now.",
         lambda w: int(w.get("local_queue_depth", 0))),
    ]
    for name, kind, unit, help_text, read in per_worker:
        suffix = "_total" if kind == "counter" else ""
        page.family(name, kind, help_text,
                    [(suffix, {"worker": str(w.get("index", 0))}, read(w)) for w in workers],
                    unit)

    blocking = info.get("blocking", {})
    _gauge(page, "mt_asyncio_blocking_threads", "Threads in the blocking pool now.",
           int(blocking.get("threads", 0)))
    _gauge(page, "mt_asyncio_blocking_threads_idle", "Blocking-pool threads waiting for a job.",
           int(blocking.get("idle", 0)))
    _gauge(page, "mt_asyncio_blocking_threads_max", "The blocking pool's thread cap.",
           int(blocking.get("max_threads", 0)))
    _gauge(page, "mt_asyncio_blocking_queue_depth",
           "Jobs (to_thread, run_in_executor) waiting for a blocking-pool thread.",
           int(blocking.get("queued", 0)))
    _counter(page, "mt_asyncio_blocking_jobs_completed", "Blocking-pool jobs that ran to the end.",
             int(blocking.get("completed", 0)))
    _counter(page, "mt_asyncio_blocking_jobs_cancelled", "Queued blocking-pool jobs dropped unrun.",
             int(blocking.get("cancelled", 0)))
    _counter(page, "mt_asyncio_blocking_jobs_abandoned",
             "Jobs still running when a shutdown gave up on them after its grace.",
             int(blocking.get("abandoned", 0)))


_LOOP_STATES = ("running", "stopped", "closed")
_TASK_STATES = ("running", "ready", "waiting")


def _loops(page):
    loops = _admin._live_loops()
    by_state = dict.fromkeys(_LOOP_STATES, 0)
    tasks, live_tasks, created, slow = [], [], [], []
    walk_left = MAX_TASKS_WALKED
    for loop_id, loop in loops:
        state = _admin._loop_state(loop).removeprefix("LOOP_STATE_").lower()
        by_state[state] = by_state.get(state, 0) + 1
        if len(created) >= MAX_LOOPS or state == "closed":
            continue
        made, slow_steps, live, _, _, _ = loop._mt_counts(False)  # Counters only.
        labels = {"loop": str(loop_id)}
        created.append(("_total", labels, made))
        slow.append(("_total", labels, slow_steps))
        live_tasks.append(("", labels, live))
        if live <= walk_left:
            walk_left -= live
            _, _, _, running, ready, waiting = loop._mt_counts(True)
            for name, count in zip(_TASK_STATES, (running, ready, waiting)):
                tasks.append(("", {"loop": str(loop_id), "state": name}, count))
    page.family("mt_asyncio_loops", "gauge", "Event loops alive in the process, by state.",
                [("", {"state": state}, count) for state, count in by_state.items()])
    page.family("mt_asyncio_tasks_live", "gauge",
                "Unfinished tasks of each open loop.", live_tasks)
    page.family("mt_asyncio_tasks", "gauge",
                "Unfinished tasks of each open loop: running a step now, queued to run "
                "one (ready), or waiting for what they await; for the loops whose tasks "
                f"a scrape may count ({MAX_TASKS_WALKED} in all).", tasks)
    page.family("mt_asyncio_tasks_created", "counter", "Tasks each open loop has made.", created)
    page.family("mt_asyncio_slow_steps", "counter",
                "Task steps and callbacks of each open loop that ran longer than its "
                "slow_callback_duration.", slow)


def _control(page, stats):
    """The control service's counters (ControlStats in proto3 JSON, where
    64-bit integers are strings and zero values are left out)."""
    def number(key):
        return int(stats.get(key, 0) or 0)

    calls = stats.get("calls") or {}
    page.family("mt_asyncio_control_calls", "counter",
                "Authorized calls the control service took, by method.",
                [("_total", {"method": str(method)}, int(count))
                 for method, count in sorted(calls.items())])
    _counter(page, "mt_asyncio_control_refused_connections",
             "Connections the control service refused (peer credentials, connection "
             "cap, no valid call in time, no descriptor to spare).",
             number("refused_connections"))
    _counter(page, "mt_asyncio_control_rejected_calls",
             "Calls refused for their credentials (UNAUTHENTICATED, PERMISSION_DENIED).",
             number("rejected_calls"))
    _counter(page, "mt_asyncio_control_calls_over_limit",
             "Authorized calls refused with RESOURCE_EXHAUSTED by the caps on calls "
             "in flight.", number("calls_over_limit"))
    _counter(page, "mt_asyncio_control_cancelled_writes",
             "Calls cancelled because their response waited on the client past the "
             "write deadline.", number("cancelled_writes"))
    _counter(page, "mt_asyncio_control_inspections_refused",
             "Read-only inspection calls refused after waiting for their CPU share.",
             number("inspections_refused"))
    _counter(page, "mt_asyncio_control_inspection_throttled_seconds",
             "Time read-only inspection calls waited for their CPU share.",
             float(stats.get("inspection_throttled_seconds", 0.0) or 0.0), "seconds")
    _gauge(page, "mt_asyncio_control_watchers", "Watch streams open now.", number("watchers"))
    _gauge(page, "mt_asyncio_control_tcp_connections",
           "TCP connections to the control service open now.", number("open_tcp_connections"))
    _gauge(page, "mt_asyncio_control_draining",
           "1 once Drain was called (grpc.health.v1 answers NOT_SERVING).",
           1 if stats.get("draining") else 0)


def _local_control_stats():
    """The counters of a control service this process serves, or None."""
    control = sys.modules.get(__package__ + ".control")
    if control is None:
        return None
    return control._live_stats()


def render(*, openmetrics=True, control=None):
    """This process's metrics as text: the OpenMetrics 1.0 format (ending
    in ``# EOF``), or Prometheus' 0.0.4 text format when ``openmetrics``
    is false. The control service's counters are on the page when this
    process serves one (``control``: its ControlStats, given by the
    service itself when it renders the page for GetMetrics)."""
    page = _Page(openmetrics)
    _runtime(page, _admin.runtime_info())
    _loops(page)
    histograms = _core._task_histograms()
    _histogram(page, "mt_asyncio_task_step_duration_seconds",
               "How long each task step ran (from send or throw into the coroutine "
               "to its return).", histograms["step"])
    _histogram(page, "mt_asyncio_task_schedule_delay_seconds",
               "From the wake that queued a task (or its creation) to the start of "
               "the step it woke.", histograms["schedule_delay"])
    if control is None:
        control = _local_control_stats()
    if control is not None:
        _control(page, control)
    return page.text()


def _get_metrics(request):
    """The control service's GetMetrics: the page, with the service's own
    counters that came with the request."""
    openmetrics = bool(request.get("openmetrics", False))
    control = request.get("control")
    text = render(openmetrics=openmetrics, control=control if isinstance(control, dict) else None)
    return {"text": text,
            "content_type": OPENMETRICS_CONTENT_TYPE if openmetrics else PROMETHEUS_CONTENT_TYPE}


_admin.register_method("GetMetrics", _get_metrics)


# --- the endpoint ----------------------------------------------------------------

class _Handler(http.server.BaseHTTPRequestHandler):
    # A scraper that connects and says nothing gives its connection up after
    # this long: the endpoint answers one request at a time.
    timeout = 5
    server_version = "mt_asyncio-metrics"
    protocol_version = "HTTP/1.0"

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path not in ("/metrics", "/"):
            self.send_error(404, "only /metrics is served here")
            return
        openmetrics = "application/openmetrics-text" in self.headers.get("Accept", "")
        try:
            body = render(openmetrics=openmetrics).encode("utf-8")
        except Exception as exc:  # noqa: BLE001 - a scrape must get an answer.
            self.send_error(500, f"rendering failed: {type(exc).__name__}")
            return
        self.send_response(200)
        self.send_header("Content-Type",
                         OPENMETRICS_CONTENT_TYPE if openmetrics else PROMETHEUS_CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self):
        self.send_error(405)

    def address_string(self):
        address = self.client_address
        return address[0] if isinstance(address, tuple) and address else "unix"

    def log_message(self, format, *args):  # noqa: A002 - the base's name.
        pass  # A scrape a second is not worth a line on stderr.


class _TCPServer(http.server.HTTPServer):
    allow_reuse_address = True
    request_queue_size = 16


class _UnixServer(socketserver.UnixStreamServer):
    request_queue_size = 16

    def get_request(self):
        request, _ = super().get_request()
        return request, ("unix", 0)


class MetricsServer:
    """A running metrics endpoint (see serve()). Use as a context manager
    or call close()."""

    def __init__(self, server, path=None):
        self._server = server
        self.path = path
        if path is None:
            host, port = server.server_address[:2]
            self.host, self.port = host, port
            shown = f"[{host}]" if ":" in host else host
            self.url = f"http://{shown}:{port}/metrics"
        else:
            self.host = self.port = None
            self.url = None
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.25},
                                        name="mt_asyncio-metrics", daemon=True)
        self._thread.start()
        self._lock = threading.Lock()
        self._closed = False

    def close(self):
        """Stop serving and close the socket (removing a Unix one). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        if self.path is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        where = self.url or f"unix:{self.path}"
        return f"<MetricsServer {'closed' if self._closed else 'serving'} {where}>"


def serve(port=DEFAULT_PORT, *, host=DEFAULT_HOST, path=None):
    """Serve ``GET /metrics`` in a thread of its own and return a
    MetricsServer.

    On TCP at ``host``:``port`` (port 0 picks a free one; see
    MetricsServer.port), or on the Unix socket ``path`` when given (made
    0600: only this user may scrape). A scraper asking for
    ``application/openmetrics-text`` gets OpenMetrics 1.0, any other the
    Prometheus 0.0.4 text format. Requests are answered one at a time,
    each connection given 5 s to send its request: what scrapers cannot
    grow is the number of threads.
    """
    if path is not None:
        path = os.path.abspath(os.fspath(path))
        try:
            if os.path.exists(path) and not _is_live_socket(path):
                os.unlink(path)
        except OSError:
            pass
        server = _UnixServer(path, _Handler)
        os.chmod(path, 0o600)
        return MetricsServer(server, path)
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an int in 0..65535, not {port!r}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_class = type("_Server", (_TCPServer,), {"address_family": family})
    return MetricsServer(server_class((host, port), _Handler))


def _is_live_socket(path):
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(0.5)
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def _address_from_env(value):
    """MT_ASYNCIO_METRICS's value as serve()'s keyword arguments, or None
    for off. Anything else (a typo, a relative path) is refused."""
    word = value.strip().lower()
    if word in _ENV_OFF:
        return None
    if word in _ENV_ON:
        return {}
    if value.startswith("/"):
        return {"path": value}
    host, sep, port = value.strip().rpartition(":")
    if port.isdigit() and int(port) <= 65535:
        options = {"port": int(port)}
        if sep:
            if not host:
                raise ValueError("a host before the ':'")
            options["host"] = host.strip("[]")
        return options
    raise ValueError("expected 1/on (127.0.0.1:9464), a port, HOST:PORT, an absolute "
                     "socket path, or 0/off")


_from_env = None


def _serve_from_env():
    """MT_ASYNCIO_METRICS: serve when mt_asyncio is imported."""
    global _from_env
    value = os.environ.get(_ENV, "")
    if _from_env is not None:
        return
    try:
        options = _address_from_env(value)
    except ValueError as exc:
        print(f"mt_asyncio: {_ENV}={value!r}: metrics not served: {exc}", file=sys.stderr)
        return
    if options is None:
        return
    try:
        _from_env = serve(**options)
    except Exception as exc:  # noqa: BLE001 - the service must still start.
        print(f"mt_asyncio: {_ENV}={value!r}: metrics not served: {exc}", file=sys.stderr)
