#!/usr/bin/env bash
# Install the packet decoder the pcap test needs (tests/test_pcap.py reads the
# pcap of an RDMA run with tshark, Wireshark's command-line decoder),
# idempotently: Debian's `tshark` package from apt, only when no `tshark` is
# on PATH already. The package asks whether users outside the `wireshark`
# group may capture; the answer is preset to "no" so the install never waits
# on a question (reading files needs no capture rights).
set -euo pipefail

log() { printf 'install-tshark: %s\n' "$*"; }
die() { printf 'install-tshark: error: %s\n' "$*" >&2; exit 1; }

if command -v tshark >/dev/null; then
  log "$(tshark --version 2>/dev/null | head -n1) ok ($(command -v tshark))"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || die "not root and no sudo: run as root or install sudo"
  SUDO=sudo
fi

echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
# Update the package lists only now: a machine that has tshark is left alone.
$SUDO apt-get update -qq
log "apt-get install tshark"
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends tshark >/dev/null
command -v tshark >/dev/null || die "the tshark package is installed but no tshark is on PATH"
log "$(tshark --version 2>/dev/null | head -n1) installed ($(command -v tshark))"
