#!/bin/bash
# One-step set-up on a fresh Debian/Ubuntu machine: install the packages,
# generate the build system, configure and build.  Run from the source tree:
#     bash scripts/setup.sh            (as root, or with sudo available)
# Cluster users with environment modules skip the apt-get step: see README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES="build-essential autoconf automake pkg-config mpich libmpich-dev libopenblas-openmp-dev
          libhdf5-mpich-dev hdf5-tools libinih-dev check python3 shellcheck gnuplot-nox"
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
missing=$(for p in $PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
    echo "setup: installing$(echo " $missing" | tr '\n' ' ')"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
# the Python helpers' packages (scripts/osdp_weights.py): best effort, tests/system/test_interop.sh SKIPs without them
if ! python3 -c 'import numpy, h5py, safetensors' 2>/dev/null; then
    python3 -m pip install --quiet numpy h5py safetensors 2>/dev/null \
        || echo "setup: pip could not install numpy h5py safetensors: tests/system/test_interop.sh will SKIP"
fi
[ -x configure ] && [ configure -nt configure.ac ] || autoreconf -fi
[ -f Makefile ] && [ Makefile -nt Makefile.am ] && [ Makefile -nt configure ] || ./configure CC=mpicc ${OSDP_CONFIGURE_FLAGS:-}
make -j"$(nproc)"
echo "setup: built ./osdp_gpt"
