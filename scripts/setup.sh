#!/bin/bash
# One-step set-up on a fresh Debian/Ubuntu machine: install the packages,
# generate the build system, configure and build.  Run from the source tree:
#     bash scripts/setup.sh            (as root, or with sudo available)
# Cluster users with environment modules skip the apt-get step: see README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES="build-essential autoconf automake pkg-config mpich libmpich-dev libopenblas-openmp-dev
          libhdf5-mpich-dev hdf5-tools libinih-dev check python3 gnuplot-nox"
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
missing=$(for p in $PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
    echo "setup: installing$(echo " $missing" | tr '\n' ' ')"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
[ -x configure ] && [ configure -nt configure.ac ] || autoreconf -fi
[ -f Makefile ] && [ Makefile -nt Makefile.am ] && [ Makefile -nt configure ] || ./configure CC=mpicc ${OSDP_CONFIGURE_FLAGS:-}
make -j"$(nproc)"
echo "setup: built ./osdp_gpt"
