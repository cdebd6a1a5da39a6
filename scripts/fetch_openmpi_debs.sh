#!/usr/bin/env bash
# Downloads Debian's Open MPI runtime packages and their library dependencies (apt-get download,
# no root needed) into ./third_party_debs (git-ignored), to carry to a GPU machine that has the
# CUDA toolkit and CMake but no MPI and no network. scripts/gpu_check.sh unpacks them there
# (dpkg -x into a private prefix; nothing is installed system-wide).
#
#   scripts/fetch_openmpi_debs.sh [--no-build-deps] [DEST]
#
# Also fetched, unless --no-build-deps: every library the full build needs (libopenmpi-dev for
# mpi.h and the mpicxx wrapper data, nlohmann-json, CLI11, Catch2 v2, OpenBLAS, Google Benchmark
# for the micro-benchmarks), so the target needs nothing but a compiler, CMake and CUDA.
# scripts/gpu_full_build.sh unpacks them there; scripts/carry_size.sh (run at the end) checks that
# the working tree plus this folder fit the device tool's 64 MiB.
#
# CAVEAT: the packages are built for THIS machine's distribution (see MANIFEST.txt: release and
# glibc). They run on a target whose glibc is at least as new (e.g. Debian 12 packages need
# glibc >= 2.36: Ubuntu 22.04 has 2.35 and will not load them). gpu_check.sh tests `mpirun
# --version` from the unpacked tree and falls back to a build without MPI (one rank) if it fails.
# Run this script on a machine of the target's distribution and release when you can.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DEPS=1
DEST=""
for a in "$@"; do
  case "$a" in
    --no-build-deps) BUILD_DEPS=0 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) DEST=$a ;;
  esac
done
DEST=${DEST:-$ROOT/third_party_debs}

command -v apt-get >/dev/null && command -v apt-cache >/dev/null ||
  { echo "fetch_openmpi_debs: needs apt-get/apt-cache (Debian or Ubuntu)" >&2; exit 1; }

# Runtime roots; their Depends/Pre-Depends are followed recursively.
ROOTS=(openmpi-bin openmpi-common libopenmpi3)
# Fetched without following their dependencies (headers, CMake configs, link-time symlinks).
LEAVES=()
if ((BUILD_DEPS)); then
  LEAVES=(libopenmpi-dev nlohmann-json3-dev libcli11-dev catch2 libopenblas-dev libopenblas-pthread-dev
          libbenchmark-dev)
  ROOTS+=(libopenblas0-pthread libbenchmark1debian)
fi
# Present on any system that has a compiler, or not needed on one node (ssh is for multi-node
# launch): never fetched, and not followed. Carrying core libraries (libc, libstdc++) would
# break the target's own tools.
STOP="libc6 libgcc-s1 libstdc++6 gcc-12-base gcc-13-base gcc-14-base zlib1g libzstd1 liblzma5
  libbz2-1.0 libudev1 libselinux1 libpcre2-8-0 libcrypt1 libmd0 libbsd0 libtinfo6 libreadline8
  readline-common debconf cdebconf dpkg tar passwd adduser debianutils install-info perl perl-base
  openssh-client ssh-client libpam0g libpam-modules libpam-modules-bin libaudit1 libaudit-common
  libcap-ng0 libsemanage2 libsemanage-common libsepol2 libacl1 libssl3 libkrb5-3 libkrb5support0
  libgssapi-krb5-2 libk5crypto3 libkeyutils1 libcom-err2 libdb5.3 libedit2 libfido2-1 libcbor0.8
  libdebian-installer4 libnewt0.52 libslang2 libtextwrap1 libuuid1 libgomp1"
STOP=$(echo $STOP)  # one space between names

declare -A seen=()
queue=("${ROOTS[@]}")
want=()
while ((${#queue[@]})); do
  p=${queue[0]}
  queue=("${queue[@]:1}")
  [[ -n ${seen[$p]:-} ]] && continue
  seen[$p]=1
  [[ " $STOP " == *" $p "* ]] && continue
  want+=("$p")
  # -i: Depends and Pre-Depends only. For "a | b" alternatives take the first; skip virtual <x>.
  while read -r dep; do
    [[ -z $dep || $dep == \<* ]] && continue
    queue+=("$dep")
  done < <(apt-cache depends -i "$p" 2>/dev/null |
           awk '/^ *\|?(Pre)?Depends:/ { alt = ($1 ~ /^\|/); if (!skip) print $2; skip = alt; next } { skip = 0 }')
done
want+=("${LEAVES[@]}")

mkdir -p "$DEST"
echo "fetch_openmpi_debs: ${#want[@]} packages -> $DEST"
(cd "$DEST" && apt-get download "${want[@]}")

{
  echo "# Packages for scripts/gpu_check.sh (unpacked with dpkg -x into a private prefix)."
  echo "fetched_on: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "distribution: $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}")"
  echo "glibc: $(ldd --version 2>/dev/null | head -1 | awk '{print $NF}')"
  echo "architecture: $(dpkg --print-architecture)"
  echo "packages:"
  for f in "$DEST"/*.deb; do echo "  $(basename "$f")"; done
} > "$DEST/MANIFEST.txt"
du -sh "$DEST" | awk '{print "fetch_openmpi_debs: " $1 " in " $2 "; manifest: MANIFEST.txt"}'
if [[ $DEST == "$ROOT/third_party_debs" ]]; then
  "$ROOT/scripts/carry_size.sh" third_party_debs || echo "fetch_openmpi_debs: the carry does not fit the device tool's limit" >&2
fi
