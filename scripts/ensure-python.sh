#!/usr/bin/env bash
# Make sure the interpreter given as $1 (default python3) is Python 3.11+ and can create a venv;
# on Debian/Ubuntu the venv module lives in a separate package, installed here with apt if missing.
set -euo pipefail
PY="${1:-python3}"
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "pubguard: $PY not found; install Python 3.11+ or run make PY=/path/to/python3.11" >&2
  exit 1
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  ver="$("$PY" -V 2>/dev/null || echo "not runnable")"
  echo "pubguard: $PY is $ver; pubguard needs Python 3.11+ (try make PY=python3.12)" >&2
  exit 1
fi
if "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  exit 0
fi
pkg="python$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-venv"
echo "pubguard: the venv module is missing, installing $pkg with apt" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "$pkg" || \
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q python3-venv
