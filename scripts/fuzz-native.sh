#!/usr/bin/env bash
# Fuzz the native publication guards' pure cores (native/src/guard/core.rs, psguard.rs,
# narada.rs) with the stable driver in native/fuzz/ (seeded generation + mutation; no
# nightly, no libFuzzer): at least
# FUZZ_INPUTS inputs (default 10 million), overflow checks and debug assertions on; any panic
# fails. Without a Rust toolchain it says so in one line and succeeds (nothing native to fuzz).
set -euo pipefail
inputs="${FUZZ_INPUTS:-10000000}"
seed="${FUZZ_SEED:-$(date +%s)}"
if ! command -v cargo >/dev/null 2>&1; then
  echo "pubguard: no Rust toolchain (cargo); the native guard is not built, nothing to fuzz" >&2
  exit 0
fi
CARGO_TARGET_DIR=native/target/fuzz cargo build --quiet --release --manifest-path native/fuzz/Cargo.toml
native/target/fuzz/release/fuzz-guard "$inputs" "$seed"
