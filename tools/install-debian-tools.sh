#!/usr/bin/env bash
# Install the Debian programs the tests drive, idempotently: each from apt only
# when it is not on PATH already, with one package-list update for all.
#   chromium  headless Chromium renders the HTML reports (tests/test_report.py)
#   tshark    Wireshark's command-line decoder reads the pcap of an RDMA run
#             (tests/test_pcap.py)
#   dfu-suffix  (package dfu-util) marks an OrangeCrab bitstream for its DFU
#             bootloader, the last step of amaranth's OrangeCrab build (superfabric board)
# usage: install-debian-tools.sh [PROGRAM ...]   (default: all of the above)
# On Ubuntu the `chromium` package is a wrapper that installs a snap, which does
# not run in most containers; there, put any Chromium on PATH first.
set -euo pipefail

log() { printf 'install-debian-tools: %s\n' "$*"; }
die() { printf 'install-debian-tools: error: %s\n' "$*" >&2; exit 1; }

version() { "$1" --version 2>/dev/null | head -n1; }

programs=("$@")
[ $# -eq 0 ] && programs=(chromium tshark dfu-suffix)
missing=()
packages=()
for p in "${programs[@]}"; do
  case "$p" in
    chromium|tshark) package="$p" ;;
    dfu-suffix) package=dfu-util ;;
    *) die "unknown program '$p': must be chromium, tshark or dfu-suffix" ;;
  esac
  if command -v "$p" >/dev/null; then
    log "$(version "$p") ok ($(command -v "$p"))"
  else
    missing+=("$p")
    packages+=("$package")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || die "not root and no sudo: run as root or install sudo"
  SUDO=sudo
fi
# tshark's package asks whether users outside the `wireshark` group may capture;
# the answer is preset to "no" so the install never waits on a question
# (reading files needs no capture rights).
echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
# Update the package lists only now: a machine that has every program is left alone.
$SUDO apt-get update -qq
log "apt-get install ${packages[*]}"
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
for p in "${missing[@]}"; do
  command -v "$p" >/dev/null || die "the $p package is installed but no $p is on PATH"
  log "$(version "$p") installed ($(command -v "$p"))"
done
