"""A private PostgreSQL cluster for one test run: initdb in a temporary
directory, a server listening on a Unix socket only (no TCP port, so it
cannot collide with another server on the machine), stopped and removed
at the end — also when a test fails or the run is interrupted.

PostgreSQL refuses to run as root; as root the cluster belongs to the
'postgres' user Debian's server package creates (or 'nobody')."""

import atexit
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile

START_TIMEOUT_S = 60


def find_bindir():
    """The folder with initdb, pg_ctl and postgres, or None: PATH first,
    then Debian's /usr/lib/postgresql/<major>/bin (newest major)."""
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return os.path.dirname(os.path.realpath(initdb))
    found = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    found.sort(key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit() else 0)
    return os.path.dirname(found[-1]) if found else None


def _server_user():
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root, and there is no 'postgres' or "
                       "'nobody' user to run the PostgreSQL server as")


class Cluster:
    """Start with start(); connection parameters in .host (the socket
    folder), .port, .user, .dbname; stop() is idempotent."""

    def __init__(self, bindir):
        self.bindir = bindir
        self.user = "mt"
        self.dbname = "postgres"
        self.port = 5432  # Only names the socket file in our own folder.
        self._server_user = _server_user()
        self.root = tempfile.mkdtemp(prefix="mt_pg_", dir="/tmp")
        self.datadir = os.path.join(self.root, "data")
        self.host = os.path.join(self.root, "sock")
        self.logfile = os.path.join(self.root, "server.log")
        os.mkdir(self.host)
        self._started = False
        if self._server_user is not None:
            os.chmod(self.root, 0o755)
            for path in (self.root, self.host):
                os.chown(path, self._server_user.pw_uid, self._server_user.pw_gid)

    def run_as(self):
        """Keyword arguments that make a subprocess run as the server's
        user (empty when we are not root)."""
        if self._server_user is None:
            return {}
        return {"user": self._server_user.pw_uid,
                "group": self._server_user.pw_gid, "extra_groups": []}

    def pg_ctl_command(self, *args):
        return [os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir, *args]

    def env(self):
        """What a child process needs to reach (and restart) the server."""
        return {
            "MT_PG_HOST": self.host, "MT_PG_PORT": str(self.port),
            "MT_PG_USER": self.user, "MT_PG_DBNAME": self.dbname,
            "MT_PG_CTL": os.path.join(self.bindir, "pg_ctl"),
            "MT_PG_DATA": self.datadir,
            "MT_PG_RUN_AS": "" if self._server_user is None else self._server_user.pw_name,
        }

    def _run(self, cmd, **kwargs):
        return subprocess.run(cmd, check=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              timeout=START_TIMEOUT_S, **self.run_as(), **kwargs)

    def start(self):
        atexit.register(self.stop)
        self._run([os.path.join(self.bindir, "initdb"), "-D", self.datadir,
                   "-U", self.user, "--auth=trust", "-E", "UTF8",
                   "--locale=C", "--no-sync"])
        options = (f"-k {self.host} -c listen_addresses='' -p {self.port} "
                   "-c fsync=off -c synchronous_commit=off "
                   "-c full_page_writes=off -c max_connections=120")
        self._started = True
        self._run(self.pg_ctl_command("-w", "-t", str(START_TIMEOUT_S), "-l",
                                      self.logfile, "-o", options, "start"))
        return self

    def stop(self):
        if self._started:
            self._started = False
            try:
                self._run(self.pg_ctl_command("-m", "immediate", "-w", "stop"))
            except (subprocess.SubprocessError, OSError):
                self._kill_postmaster()
        shutil.rmtree(self.root, ignore_errors=True)

    def _kill_postmaster(self):
        try:
            with open(os.path.join(self.datadir, "postmaster.pid")) as f:
                os.kill(int(f.readline()), signal.SIGQUIT)
        except (OSError, ValueError):
            pass

    def log_tail(self, lines=40):
        try:
            with open(self.logfile, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""
