#!/usr/bin/env bash
# Build the native fast path (native/, PyO3 + maturin) into src/pubguard/_native.abi3.so.
# Without a Rust toolchain, say so in one line and go on with the Python backend, unless
# PUBGUARD_REQUIRE_NATIVE=1 (CI), where a missing toolchain or a failed build is an error.
set -euo pipefail
BIN="${1:-.venv/bin}"
require="${PUBGUARD_REQUIRE_NATIVE:-0}"
if ! command -v cargo >/dev/null 2>&1; then
  if [ "$require" = 1 ]; then
    echo "pubguard: PUBGUARD_REQUIRE_NATIVE=1 but no Rust toolchain (cargo) is on PATH" >&2
    exit 1
  fi
  echo "pubguard: no Rust toolchain (cargo) found; using the Python backend" >&2
  exit 0
fi
out="native/target/wheels"
mkdir -p native/target
# one build at a time: concurrent maturin runs share native/target and break each other
exec 9>native/target/.build.lock
flock 9
rm -rf "$out"
if ! "$BIN/maturin" build --quiet --release --manifest-path native/Cargo.toml --out "$out" \
    --interpreter "$BIN/python" >native/target/build.log 2>&1; then
  if [ "$require" = 1 ]; then
    cat native/target/build.log >&2
    echo "pubguard: the native extension failed to build (log above)" >&2
    exit 1
  fi
  echo "pubguard: the native extension failed to build (native/target/build.log); using the Python backend" >&2
  exit 0
fi
"$BIN/python" - "$out" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as zf:
    name = next(n for n in zf.namelist() if n.endswith(".so") and "_native" in n)
    target = pathlib.Path("src/pubguard") / pathlib.Path(name).name
    # a new file renamed over the old one: a running broker keeps the library it mapped
    # (truncating it in place kills such processes with SIGBUS)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(zf.read(name))
    tmp.replace(target)
print(f"pubguard: native extension built ({target})", file=sys.stderr)
PY
