#!/usr/bin/env bash
# Install the headless browser the report test needs (tests/test_report.py
# renders report.html in Chromium), idempotently: Debian's `chromium`
# package from apt, only when no `chromium` is on PATH already.
# On Ubuntu the `chromium` package is a wrapper that installs a snap, which
# does not run in most containers; there, put any Chromium on PATH first.
set -euo pipefail

log() { printf 'install-browser: %s\n' "$*"; }
die() { printf 'install-browser: error: %s\n' "$*" >&2; exit 1; }

if command -v chromium >/dev/null; then
  log "$(chromium --version 2>/dev/null | head -n1) ok ($(command -v chromium))"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || die "not root and no sudo: run as root or install sudo"
  SUDO=sudo
fi

# Update the package lists only now: a machine that has Chromium is left alone.
$SUDO apt-get update -qq
log "apt-get install chromium"
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null || die "the chromium package is installed but no chromium is on PATH"
log "$(chromium --version 2>/dev/null | head -n1) installed ($(command -v chromium))"
