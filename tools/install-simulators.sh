#!/usr/bin/env bash
# Install the simulators superfabric needs, idempotently:
#   * Icarus Verilog >= 11 from the distribution (apt);
#   * Verilator >= 5.036, which cocotb 2.x requires. Debian 12 ships 5.006,
#     so when the verilator on PATH is older we build Debian unstable's
#     source package into a versioned prefix under $SUPERFABRIC_PREFIX and
#     reuse that prefix on every later run.
# The runner (tb/runner.py) finds the built Verilator by itself; nothing
# needs to be added to the user's shell.
set -euo pipefail

PREFIX_ROOT=${SUPERFABRIC_PREFIX:-/opt/superfabric}
VERILATOR_MIN=5.036
ICARUS_MIN=11.0

log() { printf 'install-simulators: %s\n' "$*"; }
die() { printf 'install-simulators: error: %s\n' "$*" >&2; exit 1; }

# version_ge A B: true when dotted version A >= B.
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || die "not root and no sudo: run as root or install sudo"
  SUDO=sudo
fi

apt_updated=0
apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ $apt_updated -eq 0 ]; then $SUDO apt-get update -qq; apt_updated=1; fi
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# --- Icarus Verilog -------------------------------------------------------
apt_install iverilog ccache
icarus_version=$(iverilog -V 2>/dev/null | head -n1 | sed -n 's/^Icarus Verilog version \([0-9.]*\).*/\1/p')
version_ge "${icarus_version:-0}" "$ICARUS_MIN" || die "Icarus Verilog ${icarus_version:-none} < $ICARUS_MIN"
log "Icarus Verilog $icarus_version ok"

# --- Verilator -------------------------------------------------------------
verilator_version() { "$1" --version 2>/dev/null | awk '{print $2}'; }

# A prefix built earlier wins over anything on PATH (same rule as tb/runner.py).
for bin in $(ls -d "$PREFIX_ROOT"/verilator-*/bin/verilator 2>/dev/null | sort -V -r); do
  v=$(verilator_version "$bin")
  if version_ge "${v:-0}" "$VERILATOR_MIN"; then log "Verilator $v ok ($bin)"; exit 0; fi
done
if command -v verilator >/dev/null; then
  v=$(verilator_version verilator)
  if version_ge "${v:-0}" "$VERILATOR_MIN"; then log "Verilator $v ok ($(command -v verilator))"; exit 0; fi
  log "Verilator $v on PATH is older than $VERILATOR_MIN: building from Debian unstable's source package"
fi

apt_install dpkg-dev build-essential autoconf flex bison help2man perl python3 \
  libfl-dev zlib1g-dev ca-certificates

# A private apt configuration with one deb-src entry for sid that reuses the
# machine's own Debian URIs, so the system's sources stay untouched.
work=$(mktemp -d /tmp/superfabric-verilator.XXXXXX)
trap 'rm -rf "$work"' EXIT
uris=$(
  { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs:[[:space:]]*//p' | tr ' ' '\n';
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      sed -n -E 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+).*/\2/p'; } |
  grep -E '/debian/?$' | sort -u || true)
[ -n "$uris" ] || die "no Debian archive URI found in the machine's apt sources"
mkdir -p "$work/lists/partial" "$work/archives/partial"
for u in $uris; do
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $u sid main"
done > "$work/sid-src.list"
aptopts=(-o "Dir::Etc::SourceList=$work/sid-src.list" -o "Dir::Etc::SourceParts=-"
         -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives"
         -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
         -o "APT::Sandbox::User=root")  # a private scratch dir, no need for _apt
log "fetching the Verilator source package index (sid)"
$SUDO apt-get "${aptopts[@]}" update -qq
(cd "$work" && $SUDO apt-get "${aptopts[@]}" source -qq verilator >/dev/null)
src=$(ls -d "$work"/verilator-*/ | head -n1)
[ -d "$src" ] || die "apt-get source verilator produced no source tree"
version=$(basename "$src" | sed 's/^verilator-//')
version_ge "$version" "$VERILATOR_MIN" || die "sid's Verilator $version is older than $VERILATOR_MIN"
prefix="$PREFIX_ROOT/verilator-$version"

log "building Verilator $version into $prefix (one time, several minutes)"
cd "$src"
[ -x configure ] || autoconf
./configure --prefix="$prefix" >/dev/null
# Only the optimised binary: the debug ones double the build time and are
# never used by the testbenches, so install without them.
jobs=$(nproc)
make -j"$jobs" -C src opt >"$work/build.log" 2>&1 || { tail -n 40 "$work/build.log"; die "Verilator build failed"; }
$SUDO make install-all VL_INST_PUBLIC_BIN_FILES=verilator_bin >"$work/install.log" 2>&1 ||
  { tail -n 40 "$work/install.log"; die "Verilator install failed"; }
log "Verilator $("$prefix/bin/verilator" --version | awk '{print $2}') installed in $prefix"
