"""The test side of backend_child.py: runs a scenario module once per
backend (each in a process of its own, bounded) and compares each
scenario's observation on mt_asyncio with stdlib's."""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
N_THREADS = int(os.environ.get("MT_LIBS_THREADS", "4"))
# stdlib first: what every other backend is compared with.
BACKENDS = ["stdlib", "mt@1", f"mt@{N_THREADS}"]


class BackendRuns:
    """Runs each backend's child at most once, when first asked."""

    def __init__(self, module, env=None, timeout_s=600):
        self.module = module
        self.env = dict(os.environ, **(env or {}))
        self.timeout_s = timeout_s
        self._results = {}

    def results(self, backend):
        if backend not in self._results:
            self._results[backend] = self._run(backend)
        return self._results[backend]

    def _run(self, backend):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "results.json")
            cmd = [sys.executable, os.path.join(HERE, "backend_child.py"),
                   self.module, backend, out]
            # Output to a file, not a pipe: a process the child left behind
            # would hold a pipe open and keep us waiting past the timeout.
            with open(os.path.join(tmp, "output.txt"), "w+") as output:
                try:
                    status = subprocess.run(cmd, env=self.env, stdout=output,
                                            stderr=subprocess.STDOUT,
                                            timeout=self.timeout_s).returncode
                except subprocess.TimeoutExpired:
                    status = f"killed after {self.timeout_s} s (hung)"
                output.seek(0)
                output = output.read()
            try:
                with open(out) as f:
                    results = json.load(f)
            except (OSError, ValueError):
                results = {}
        return {"scenarios": results, "status": status,
                "output_tail": output[-4000:]}

    def check(self, name, backend):
        """Asserts that the scenario ran clean on stdlib and on backend and
        that both observed the same."""
        expected = self._record(name, "stdlib")
        if backend == "stdlib":
            return
        observed = self._record(name, backend)
        assert observed["observed"] == expected["observed"], (
            f"{name}: {backend} observed differently from stdlib")

    def _record(self, name, backend):
        run = self.results(backend)
        record = run["scenarios"].get(name)
        assert record is not None, (
            f"{name} did not run on {backend} (child {run['status']}):\n"
            f"{run['output_tail']}")
        problems = {k: record[k] for k in ("error", "loop_errors", "leak",
                                           "children_left") if k in record}
        assert not problems, f"{name} on {backend}: {problems}"
        return record
