#!/usr/bin/env bash
# Make sure a Java 17+ runtime is present (Spark needs it); install it with apt if missing.
set -euo pipefail
java_major() {
  java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1") ? v[2] : v[1]; exit}'
}
if command -v java >/dev/null 2>&1 && [ "$(java_major)" -ge 17 ] 2>/dev/null; then
  exit 0
fi
echo "pubguard: Java 17+ not found, installing openjdk-17-jre-headless with apt" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q openjdk-17-jre-headless
java -version
