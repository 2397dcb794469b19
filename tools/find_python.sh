#!/usr/bin/env bash
# Finds the CPython interpreter the project builds against and prints one
# line: "PATH VERSION FREE_THREADED" (FREE_THREADED is 1 or 0).
#
# Order: $MT_PYTHON if set (and it must qualify); otherwise the first
# free-threaded CPython >= 3.13 on PATH or among pyenv's versions, then the
# first GIL CPython >= 3.13 found the same way. Exits 1 with a message on
# stderr when nothing qualifies. Used by tools/setup.sh and by the Bazel
# repository rule in third_party/python_configure.bzl, so both agree.
set -u

# Prints "VERSION FT" for a qualifying CPython >= 3.13, or fails.
probe() {
  "$1" - <<'PY' 2>/dev/null
import sys, sysconfig
if sys.implementation.name != "cpython" or sys.version_info < (3, 13):
    raise SystemExit(1)
ft = 1 if sysconfig.get_config_var("Py_GIL_DISABLED") else 0
print("%d.%d.%d" % sys.version_info[:3], ft)
PY
}

if [ -n "${MT_PYTHON:-}" ]; then
  if out=$(probe "$MT_PYTHON"); then
    echo "$(command -v "$MT_PYTHON" || echo "$MT_PYTHON") $out"
    exit 0
  fi
  echo "MT_PYTHON=$MT_PYTHON is not a runnable CPython >= 3.13" >&2
  exit 1
fi

candidates=()
for name in python3.15t python3.14t python3.13t python3.15 python3.14 python3.13 python3; do
  # pyenv shims exist for versions that are not selected; `command -v`
  # finds them, and probe() then rejects the ones that do not run.
  p=$(command -v "$name" 2>/dev/null) && candidates+=("$p")
done
pyenv_root=${PYENV_ROOT:-${HOME:-/root}/.pyenv}
for p in "$pyenv_root"/versions/*/bin/python3.1[3-9]t "$pyenv_root"/versions/*/bin/python3.1[3-9]; do
  [ -x "$p" ] && candidates+=("$p")
done

gil_choice=""
for p in "${candidates[@]}"; do
  out=$(probe "$p") || continue
  case "$out" in
    *" 1") echo "$p $out"; exit 0 ;;
    *) [ -z "$gil_choice" ] && gil_choice="$p $out" ;;
  esac
done
if [ -n "$gil_choice" ]; then
  echo "$gil_choice"
  exit 0
fi
echo "no CPython >= 3.13 found: set MT_PYTHON=/path/to/python3.14t, or put one on PATH" >&2
exit 1
