#!/bin/bash
# Shows that Bazel itself enforces the package map of pyext/src
# (docs/architecture.md): in a scratch copy of the workspace, a target in
# pyext/src/future that depends on pyext/src/loop, a package above it,
# must fail with a visibility error. Analysis only (--nobuild), so nothing
# is compiled; the copy has its own output base, so the real tree and its
# Bazel server are never touched. pyext/tests/layering_test.py checks the
# includes and BUILD files of the real tree against the same map.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
cleanup() {
  (cd "$scratch/tree" 2>/dev/null && bazel --output_base="$scratch/out" shutdown) >/dev/null 2>&1 || true
  rm -rf "$scratch"
}
trap cleanup EXIT

mkdir "$scratch/tree"
(cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 tar -cf -) |
  tar -xf - -C "$scratch/tree"
cat >>"$scratch/tree/pyext/src/future/BUILD" <<'PROBE'

# The probe: future/ using loop/, against the map.
cc_library(
    name = "layering_probe",
    deps = ["//pyext/src/loop"],
)
PROBE

cd "$scratch/tree"
if out=$(bazel --output_base="$scratch/out" build --nobuild //pyext/src/future:layering_probe 2>&1); then
  echo "FAIL: //pyext/src/future:layering_probe built; pyext/src/loop is visible to future/" >&2
  exit 1
fi
if ! grep -q "target '//pyext/src/loop:loop' is not visible from target '//pyext/src/future:layering_probe'" <<<"$out"; then
  echo "FAIL: the probe failed for another reason than visibility:" >&2
  echo "$out" | tail -20 >&2
  exit 1
fi
echo "layering: //pyext/src/future cannot use //pyext/src/loop (visibility error, as the map says)"
