#!/bin/sh
# bloomery installer (POSIX sh): picks the release archive for this OS, CPU and NVIDIA cards,
# checks its sha256 against the release's SHA256SUMS, and installs bloomery-serve.
#
#   curl -fsSL https://github.com/bloomery/bloomery/releases/latest/download/install.sh | sh
#
# Settings (environment):
#   BLOOMERY_RELEASE_URL  where the archives and SHA256SUMS are (default: the latest GitHub release)
#   BLOOMERY_INSTALL_DIR  where the executable goes (default: ~/.local/bin)
#   BLOOMERY_VERSION      install this version instead of the one the release lists
#   BLOOMERY_VARIANT      cpu or cuda: force the Linux build instead of choosing from the cards
#   BLOOMERY_CPUINFO      read CPU flags from this file instead of /proc/cpuinfo
# Needs: uname, mktemp, mkdir, mv, rm, chmod, grep, sed, tr, head, tar with gzip, curl or wget,
# and sha256sum, shasum or openssl.
set -eu

RELEASE_URL=${BLOOMERY_RELEASE_URL:-https://github.com/bloomery/bloomery/releases/latest/download}
RELEASE_URL=${RELEASE_URL%/}
INSTALL_DIR=${BLOOMERY_INSTALL_DIR:-${HOME:?HOME is not set; set BLOOMERY_INSTALL_DIR}/.local/bin}
CPUINFO=${BLOOMERY_CPUINFO:-/proc/cpuinfo}
WANT_VERSION=${BLOOMERY_VERSION:-}
VARIANT=${BLOOMERY_VARIANT:-}
# Oldest card the CUDA builds run on (SASS sm_86, sm_90, sm_120a plus PTX on x86-64; sm_121a on aarch64)
# and the oldest driver for the CUDA 13 runtime they are built with.
MIN_CC_X64=86
MIN_DRIVER=580

say() { printf '%s\n' "bloomery install: $*" >&2; }
die() {
  code=$1
  shift
  printf '%s\n' "bloomery install: error: $*" >&2
  exit "$code"
}

need() { command -v "$1" >/dev/null 2>&1 || die 10 "'$1' is needed and is not on PATH"; }

fetch() { # fetch URL FILE
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 -o "$2" "$1" || return 1
  elif command -v wget >/dev/null 2>&1; then
    wget -q -O "$2" "$1" || return 1
  else
    die 10 "curl or wget is needed to download the release"
  fi
}

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | sed 's/ .*//'
  elif command -v shasum >/dev/null 2>&1; then
    shasum -a 256 "$1" | sed 's/ .*//'
  elif command -v openssl >/dev/null 2>&1; then
    openssl dgst -sha256 -r "$1" | sed 's/ .*//'
  else
    die 10 "sha256sum, shasum or openssl is needed to check the download"
  fi
}

for t in uname mktemp mkdir mv rm chmod grep sed tr head tar gzip; do need "$t"; done

# --- platform ---------------------------------------------------------------------------------
os=$(uname -s)
machine=$(uname -m)
case "$os" in
  Linux) os=linux ;;
  Darwin) os=darwin ;;
  *) die 2 "unsupported operating system '$os': bloomery ships for Linux x86-64, Linux aarch64 and macOS on Apple silicon" ;;
esac
case "$machine" in
  x86_64 | amd64) arch=x64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) die 2 "unsupported CPU architecture '$machine': bloomery ships for x86-64 and arm64" ;;
esac
if [ "$os" = darwin ] && [ "$arch" != arm64 ]; then
  die 2 "macOS on Intel is not supported: bloomery-serve-metal needs Apple silicon (M1 or newer)"
fi

# --- CPU features (x86-64 needs AVX2: the executable's runtime is built for it) ---------------
if [ "$os" = linux ] && [ "$arch" = x64 ]; then
  [ -r "$CPUINFO" ] || die 3 "cannot read $CPUINFO to check the CPU's features"
  flags=$(grep -m 1 '^flags' "$CPUINFO" || true)
  case " $(printf '%s' "$flags" | sed 's/^flags[[:space:]]*:[[:space:]]*//') " in
    *" avx2 "*) ;;
    *) die 3 "this CPU has no AVX2; bloomery's x86-64 build needs it (Intel Haswell, AMD Excavator / Zen or newer)" ;;
  esac
fi

# --- NVIDIA cards -----------------------------------------------------------------------------
best_cc=0
cards=""
driver=""
if [ "$os" = linux ] && command -v nvidia-smi >/dev/null 2>&1; then
  if gpu_lines=$(nvidia-smi --query-gpu=compute_cap,driver_version --format=csv,noheader 2>/dev/null); then
    # one line a card: "8.6, 560.35.03"
    for line in $(printf '%s\n' "$gpu_lines" | tr -d ' ' ); do
      cc=${line%%,*}
      drv=${line#*,}
      case "$cc" in
        [0-9]*.[0-9]*) ;;
        *) continue ;;
      esac
      major=${cc%%.*}
      minor=${cc#*.}
      n=$((major * 10 + minor))
      cards="$cards $cc"
      driver=$drv
      if [ "$n" -gt "$best_cc" ]; then best_cc=$n; fi
    done
  else
    say "nvidia-smi is present but did not answer (is the driver loaded?); choosing without the cards"
  fi
fi
cards=${cards# }
driver_major=${driver%%.*}
case "$driver_major" in '' | *[!0-9]*) driver_major=0 ;; esac

# --- which archive ----------------------------------------------------------------------------
suffix=""
exe=bloomery-serve
if [ "$os" = darwin ]; then
  suffix=darwin-arm64
  exe=bloomery-serve-metal
elif [ "$arch" = arm64 ]; then
  # aarch64: the CPU build (NEON, dotprod, i8mm chosen at run time), or the CUDA build for the
  # NVIDIA GB10 (compute 12.1) where one is found with a new enough driver
  case "$VARIANT" in
    cpu) suffix=linux-arm64 ;;
    cuda) suffix=linux-arm64-cuda ;;
    '')
      if [ -z "$cards" ]; then
        suffix=linux-arm64
      elif [ "$best_cc" -lt 121 ]; then
        say "NVIDIA card(s) found (compute $cards) but the aarch64 CUDA build is for the GB10 (compute 12.1); installing the CPU build"
        suffix=linux-arm64
      elif [ "$driver_major" -lt "$MIN_DRIVER" ]; then
        say "NVIDIA driver $driver is older than $MIN_DRIVER, which the CUDA build needs; installing the CPU build (update the driver and run this again for the GPU build)"
        suffix=linux-arm64
      else
        suffix=linux-arm64-cuda
      fi
      ;;
    *) die 5 "BLOOMERY_VARIANT must be cpu or cuda, not '$VARIANT'" ;;
  esac
else
  case "$VARIANT" in
    cpu) suffix=linux-x64 ;;
    cuda) suffix=linux-x64-cuda ;;
    '')
      if [ -z "$cards" ]; then
        suffix=linux-x64
      elif [ "$best_cc" -lt "$MIN_CC_X64" ]; then
        say "NVIDIA card(s) found (compute $cards) but the CUDA build needs compute 8.6 or newer; installing the CPU build"
        suffix=linux-x64
      elif [ "$driver_major" -lt "$MIN_DRIVER" ]; then
        say "NVIDIA driver $driver is older than $MIN_DRIVER, which the CUDA build needs; installing the CPU build (update the driver and run this again for the GPU build)"
        suffix=linux-x64
      else
        suffix=linux-x64-cuda
      fi
      ;;
    *) die 5 "BLOOMERY_VARIANT must be cpu or cuda, not '$VARIANT'" ;;
  esac
fi
if [ -n "$cards" ]; then
  say "platform $os-$arch, NVIDIA compute $cards, driver $driver -> $suffix"
else
  say "platform $os-$arch -> $suffix"
fi

# --- download and check -----------------------------------------------------------------------
tmp=$(mktemp -d 2>/dev/null || mktemp -d -t bloomery)
trap 'rm -rf "$tmp"' EXIT INT TERM
fetch "$RELEASE_URL/SHA256SUMS" "$tmp/SHA256SUMS" || die 6 "cannot download $RELEASE_URL/SHA256SUMS"
if [ -n "$WANT_VERSION" ]; then
  name="bloomery-$WANT_VERSION-$suffix.tar.gz"
  line=$(grep -E "^[0-9a-f]{64}  $(printf '%s' "$name" | sed 's/[.]/[.]/g')\$" "$tmp/SHA256SUMS" | head -n 1 || true)
else
  line=$(grep -E "^[0-9a-f]{64}  bloomery-[0-9A-Za-z.+-]+-$suffix[.]tar[.]gz\$" "$tmp/SHA256SUMS" | head -n 1 || true)
fi
[ -n "$line" ] || die 6 "the release at $RELEASE_URL has no ${WANT_VERSION:+version $WANT_VERSION of the }$suffix archive (SHA256SUMS lists none)"
want=${line%% *}
name=${line##* }
say "downloading $name"
fetch "$RELEASE_URL/$name" "$tmp/$name" || die 6 "cannot download $RELEASE_URL/$name"
got=$(sha256_of "$tmp/$name")
if [ "$got" != "$want" ]; then
  die 7 "checksum mismatch for $name: SHA256SUMS says $want, the download is $got; nothing was installed (try again; if it persists, report it)"
fi

mkdir -p "$tmp/x"
tar -xzf "$tmp/$name" -C "$tmp/x" || die 8 "cannot unpack $name"
[ -f "$tmp/x/$exe" ] || die 8 "$name holds no $exe"

# --- install ----------------------------------------------------------------------------------
mkdir -p "$INSTALL_DIR" || die 9 "cannot create $INSTALL_DIR (set BLOOMERY_INSTALL_DIR to a writable directory)"
mv "$tmp/x/$exe" "$INSTALL_DIR/.$exe.new" || die 9 "cannot write to $INSTALL_DIR (set BLOOMERY_INSTALL_DIR to a writable directory)"
chmod 755 "$INSTALL_DIR/.$exe.new"
mv -f "$INSTALL_DIR/.$exe.new" "$INSTALL_DIR/$exe" || die 9 "cannot replace $INSTALL_DIR/$exe"
if ! version=$("$INSTALL_DIR/$exe" --version 2>&1); then
  die 9 "installed $INSTALL_DIR/$exe but it does not run here: $version"
fi
say "installed $version to $INSTALL_DIR/$exe"

run="$exe"
case ":${PATH:-}:" in
  *":$INSTALL_DIR:"*) ;;
  *)
    say "$INSTALL_DIR is not on your PATH; add it with:"
    printf '\n    export PATH="%s:$PATH"\n\n' "$INSTALL_DIR" >&2
    run="$INSTALL_DIR/$exe"
    ;;
esac
printf '%s\n' "Next: serve the built-in demo model (no download needed):" "" "    $run --demo" ""
