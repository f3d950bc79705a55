#!/usr/bin/env bash
# Installs the load generator wrk (Debian package) when it is missing. Tries the install
# first and refreshes the package lists only if that fails. Without root or apt-get it
# says so and `make bench` falls back to the Python closed-loop generator.
set -euo pipefail

if command -v wrk >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "bench: wrk is missing and apt-get is not available; using the Python generator" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "bench: wrk is missing and this user cannot install it; using the Python generator" >&2
    exit 0
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -q wrk >/dev/null; then
  $SUDO apt-get update -q >/dev/null
  $SUDO apt-get install -y -q wrk >/dev/null
fi
command -v wrk >/dev/null
