#!/bin/bash
# scripts/gpu_kit (issue 30): the portable GPU kit, packed from this build
# tree (GPU_KIT_BUILD: no second nvcc build in make check), checked as far
# as a machine without a GPU allows —
#   - the kit (DIR: selftest, payload, MANIFEST) takes under 60 MiB;
#   - unpacked, the binary's RPATH is $ORIGIN/lib and ldd with
#     LD_LIBRARY_PATH unset finds MPICH, HDF5 and OpenBLAS in the kit's lib/,
#     and every library of the kit's programs somewhere;
#   - the tiny model trains on 2 ranks on the CPU backend with the kit's own
#     mpiexec, first as is, then in a mount namespace (unshare -m, as root)
#     where the system's library folder holds glibc alone and the system's
#     hydra proxy is hidden: the losses equal the tree's own binary's,
#     bitwise (the same objects and libraries on the same machine);
#   - the kit's selftest with no GPU prints SKIP for each GPU section with its
#     reason, writes its report under REPORT_DIR and exits 0 (its time is printed, not asserted).
# SKIP (exit 77) with the reason where the build has no CUDA (the CUDA
# toolkit is absent), MPICH's hydra launcher or xz is missing; the namespace
# part is skipped, with the reason, where unshare -m is not allowed.
set -u
. "$(dirname "$0")/../lib/test_lib.sh" gpu-kit-work
if ! grep -q '^#define OSDP_HAVE_CUDA 1' "$BUILD/config.h" 2> /dev/null; then
    echo "SKIP: this build has no CUDA backend (configure found no CUDA toolkit, or --without-cuda): no kit to pack"
    exit 77
fi
command -v mpiexec.hydra > /dev/null || { echo "SKIP: MPICH's hydra launcher (mpiexec.hydra) is not installed"; exit 77; }
command -v xz > /dev/null || { echo "SKIP: xz is not installed (apt-get install xz-utils): the kit's payload cannot be packed"; exit 77; }
KITDIR=$WORK/kit
t0=$SECONDS
if GPU_KIT_BUILD="$BUILD" GPU_KIT_XZ=0 bash "$SRC/scripts/gpu_kit" "$KITDIR" > "$WORK/gpu_kit.out" 2>&1; then
    ok "scripts/gpu_kit packed the build in $((SECONDS - t0)) s: $(tail -1 "$WORK/gpu_kit.out")"
else
    bad "scripts/gpu_kit failed" "$WORK/gpu_kit.out"
    summary test_gpu_kit
    exit 1
fi
kib=$(du -ck "$KITDIR"/selftest "$KITDIR"/osdp_gpu_kit.tar.xz "$KITDIR"/MANIFEST | tail -1 | cut -f1)
[ "$kib" -lt $((60 * 1024)) ] && ok "the kit takes $((kib / 1024)) MiB (< 60 MiB)" || bad "the kit takes $((kib / 1024)) MiB"
# a directory that is not a kit is never overwritten
mkdir -p "$WORK/precious" && echo mine > "$WORK/precious/notes.txt"
if GPU_KIT_BUILD="$BUILD" bash "$SRC/scripts/gpu_kit" "$WORK/precious" > "$WORK/precious.out" 2>&1; then
    bad "gpu_kit packed into a directory holding a user's file" "$WORK/precious.out"
else
    grep -q "not an osdp GPU kit" "$WORK/precious.out" && [ "$(cat "$WORK/precious/notes.txt")" = mine ] \
        && ok "gpu_kit refuses a directory that is not a kit, leaving it alone" || bad "unclear refusal" "$WORK/precious.out"
fi

"$KITDIR/selftest" --unpack > "$WORK/unpack.out" 2>&1 || bad "selftest --unpack failed" "$WORK/unpack.out"
KIT=$KITDIR/kit
readelf -d "$KIT/osdp_gpt" | grep -q 'R.*PATH.*\[\$ORIGIN/lib\]' && ok "osdp_gpt's RPATH is \$ORIGIN/lib" \
    || bad "osdp_gpt's RPATH is not \$ORIGIN/lib: $(readelf -d "$KIT/osdp_gpt" | grep PATH)"
env -u LD_LIBRARY_PATH ldd "$KIT/osdp_gpt" > "$WORK/ldd.txt" 2>&1
inside=0
for lib in libmpich.so libhdf5_mpich.so libopenblas.so; do
    grep -q "${lib}[.0-9]* => $KIT/lib/" "$WORK/ldd.txt" && inside=$((inside + 1))
done
[ $inside = 3 ] && ok "ldd (LD_LIBRARY_PATH unset): MPICH, HDF5 and OpenBLAS resolve in the kit's lib/" \
    || bad "ldd: MPICH, HDF5 or OpenBLAS outside the kit" "$WORK/ldd.txt"
missing=$(for f in "$KIT/osdp_gpt" "$KIT/libosdp_cuda.so" "$KIT/tests/comm/test_nccl" "$KIT/tests/tools/compare_weights"; do
              env -u LD_LIBRARY_PATH ldd "$f"; done | grep -c "not found")
[ "$missing" = 0 ] && ok "every library of the kit's programs is found" || bad "$missing libraries not found"

# 2 ranks of the tiny model on the CPU backend: the tree's binary, the kit's as is, the kit's with the system hidden
train_args=(train --model "$SRC/input/models/tiny.ini" --data "$DATA" --backend cpu --steps 4 --batch 2 --plan zdp --quiet)
"$MPIEXEC" -n 2 "$BIN" "${train_args[@]}" --log "$WORK/tree.log" > "$WORK/tree.out" 2>&1 \
    || bad "the tree's binary did not train" "$WORK/tree.out"
# a bound on each of the kit's runs (a hang must fail the test, not hold make check): hydra ends its ranks
# on SIGTERM; any left after it are ended too
bounded() { timeout -s TERM -k 10 180 "$@"; local st=$?; pkill -KILL -f "^$KIT/osdp_gpt " 2> /dev/null; return $st; }
bounded env -u LD_LIBRARY_PATH "$KIT/bin/mpiexec" -n 2 "$KIT/osdp_gpt" "${train_args[@]}" --log "$WORK/kit.log" \
    > "$WORK/kit.out" 2>&1
rc=$?
[ $rc = 0 ] && [ -n "$(losses "$WORK/kit.log")" ] && [ "$(losses "$WORK/kit.log")" = "$(losses "$WORK/tree.log")" ] \
    && ok "the kit's mpiexec -n 2 osdp_gpt trains the tiny model: losses bitwise the tree's binary's" \
    || bad "the kit's run (status $rc) differs from the tree's" "$WORK/kit.out"

# --backend cuda: osdp_gpt opens the kit's plugin beside it (libosdp_cuda.so, static cudart, RPATH $ORIGIN/lib), with
# this machine's CUDA folder on the library path: the plugin loads and the run stops at the device (no GPU here), not
# at the loader (without CUDA's libraries: below, in the namespace that hides CUDA's folder)
cuda_args=("${train_args[@]/cpu/cuda}")
CUDA_LIBDIR=$(dirname "$(readlink -f "$(ldd "$BUILD/libosdp_cuda.so" | awk '$1 == "libnccl.so.2" { print $3 }')")")
bounded env LD_LIBRARY_PATH="$CUDA_LIBDIR" "$KIT/bin/mpiexec" -n 2 "$KIT/osdp_gpt" "${cuda_args[@]}" > "$WORK/kit_cuda.out" 2>&1
rc=$?
[ $rc != 0 ] && grep -q -- "--backend cuda: no usable GPU" "$WORK/kit_cuda.out" && ! grep -q "plugin" "$WORK/kit_cuda.out" \
    && ok "the kit's --backend cuda loads its plugin and stops at the device: $(grep -o 'no usable GPU.*' "$WORK/kit_cuda.out" | head -1 | cut -c1-120)" \
    || bad "the kit's --backend cuda (status $rc): not the device's error" "$WORK/kit_cuda.out"

# the system's libraries hidden: its library folder replaced by one holding glibc alone (and /bin/sh's
# needs), the system's hydra proxy by an empty file
SYSLIB=$(dirname "$(readlink -f /lib64/ld-linux-x86-64.so.2)")
mkdir -p "$WORK/probe_from" "$WORK/probe_to"
can_hide=0   # root, a mount namespace, and bind mounts inside it (a container may refuse either)
[ "$(id -u)" = 0 ] && unshare -m sh -c "mount --bind '$WORK/probe_from' '$WORK/probe_to'" 2> /dev/null && can_hide=1
if [ $can_hide = 0 ]; then
    echo "SKIP: (part) not root, or no mount namespace with bind mounts here: the run with the system's libraries hidden was not made"
else
    mkdir -p "$WORK/glibc"
    for f in "$SYSLIB"/ld-linux-x86-64.so.2 "$SYSLIB"/lib{c,m,mvec,pthread,dl,rt,resolv,util,anl}.so.* "$SYSLIB"/libnss_*.so.2; do
        [ -e "$f" ] && cp -L "$f" "$WORK/glibc/"
    done
    : > "$WORK/empty"
    cat > "$WORK/hidden.sh" <<HIDDEN
mount --bind "$WORK/glibc" "$SYSLIB" || exit 90
for p in /usr/bin/hydra_pmi_proxy /usr/bin/mpiexec.hydra; do [ -e \$p ] && mount --bind "$WORK/empty" \$p; done
for f in "$SYSLIB"/*; do echo "\${f##*/}"; done > "$WORK/hidden_libs.txt"
exec "$KIT/bin/mpiexec" -n 2 "$KIT/osdp_gpt" $(printf '%q ' "${train_args[@]}") --log "$WORK/hidden.log"
HIDDEN
    bounded env -u LD_LIBRARY_PATH unshare -m /bin/sh "$WORK/hidden.sh" > "$WORK/hidden.out" 2>&1
    rc=$?
    if grep -q -E 'libmpich|libhdf5|libopenblas' "$WORK/hidden_libs.txt" 2> /dev/null || [ $rc = 90 ]; then
        bad "the system's libraries were not hidden (status $rc)" "$WORK/hidden.out"
    elif [ $rc = 0 ] && [ "$(losses "$WORK/hidden.log")" = "$(losses "$WORK/tree.log")" ]; then
        ok "system's MPICH/HDF5/OpenBLAS hidden ($SYSLIB holds $(wc -l < "$WORK/hidden_libs.txt") glibc files): the kit trains, losses bitwise"
    else
        bad "with the system's libraries hidden the kit's run failed (status $rc)" "$WORK/hidden.out"
    fi
fi

# cuBLAS and NCCL where a bare GPU machine has them: this machine's CUDA folder hidden, they are missing and
# named; then found in site-packages' nvidia/*/lib (a fake one on PYTHONPATH holding the real folder)
CUDA_REAL=$(dirname "$(readlink -f "$(env -u LD_LIBRARY_PATH ldd "$KIT/libosdp_cuda.so" | awk '$1 == "libnccl.so.2" { print $3 }')")")
CUDA_TOP=$(cd "$CUDA_REAL/.." && pwd -P)
case $CUDA_TOP in /usr/local/?*|/opt/?*) in_cuda_folder=1 ;; *) in_cuda_folder=0 ;; esac
if [ $can_hide = 0 ] || [ $in_cuda_folder = 0 ]; then
    echo "SKIP: (part) no mount namespace with bind mounts, or NCCL not in a CUDA folder ($CUDA_REAL): the library search was not checked"
else
    mkdir -p "$WORK/site/nvidia/cu13/lib" "$WORK/emptydir"
    cat > "$WORK/search.sh" <<SEARCH
mount --bind "$CUDA_REAL" "$WORK/site/nvidia/cu13/lib" || exit 90
mount --bind "$WORK/emptydir" "$CUDA_TOP" || exit 90
[ -d /usr/local/cuda ] && mount --bind "$WORK/emptydir" /usr/local/cuda
# this machine's own Python wheels of NVIDIA's libraries, where it has some, hidden too
for d in \$(python3 -c 'import site; print("\\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2> /dev/null); do
    [ -d "\$d/nvidia" ] && mount --bind "$WORK/emptydir" "\$d/nvidia"
done
"$KIT/scripts/gpu_selftest" --libraries > "$WORK/search_missing.out" 2>&1; echo \$? > "$WORK/search_missing.rc"
PYTHONPATH="$WORK/site" "$KIT/scripts/gpu_selftest" --libraries > "$WORK/search_found.out" 2>&1
# no CUDA library anywhere: --backend cpu trains, --backend cuda fails naming the plugin and the library it lacks
timeout -k 5 120 "$KIT/bin/mpiexec" -n 2 "$KIT/osdp_gpt" $(printf '%q ' "${train_args[@]}") --log "$WORK/nocuda.log" > "$WORK/nocuda_cpu.out" 2>&1
timeout -k 5 120 "$KIT/bin/mpiexec" -n 2 "$KIT/osdp_gpt" $(printf '%q ' "${cuda_args[@]}") > "$WORK/nocuda_cuda.out" 2>&1
echo \$? > "$WORK/nocuda_cuda.rc"
SEARCH
    env -u LD_LIBRARY_PATH unshare -m /bin/bash "$WORK/search.sh"
    rc=$?
    if [ "$(cat "$WORK/search_missing.rc" 2> /dev/null)" = 1 ] && grep -q "MISSING: .*libnccl.so.2" "$WORK/search_missing.out" \
        && grep -q "MISSING: .*libcublas.so.13" "$WORK/search_missing.out"; then
        ok "CUDA's folder hidden: the self-test names what is missing ($(grep -o 'MISSING: [^(]*' "$WORK/search_missing.out"))"
    else
        bad "CUDA's folder hidden: missing libraries not named" "$WORK/search_missing.out"
    fi
    [ $rc = 0 ] && grep -q "libnccl.so.2 from $WORK/site/nvidia/cu13/lib" "$WORK/search_found.out" \
        && ok "found in site-packages' nvidia/*/lib: $(cut -c1-150 "$WORK/search_found.out")" \
        || bad "the library search did not find the site-packages' copies (status $rc)" "$WORK/search_found.out"
    [ "$(losses "$WORK/nocuda.log")" = "$(losses "$WORK/tree.log")" ] \
        && ok "no CUDA library on the machine: the kit's --backend cpu trains, losses bitwise the tree's" \
        || bad "no CUDA library on the machine: the kit's --backend cpu did not train" "$WORK/nocuda_cpu.out"
    [ "$(cat "$WORK/nocuda_cuda.rc" 2> /dev/null)" != 0 ] \
        && grep -q "plugin $KIT/libosdp_cuda.so could not be loaded: lib[a-zA-Z]*\.so[.0-9]*: cannot open" "$WORK/nocuda_cuda.out" \
        && ok "no CUDA library: the kit's --backend cuda names the plugin and what it lacks: $(grep -o 'could not.*' "$WORK/nocuda_cuda.out" | head -1 | cut -c1-120)" \
        || bad "no CUDA library: the kit's --backend cuda did not name the plugin's missing library" "$WORK/nocuda_cuda.out"
fi

# the self-test without a GPU: every GPU section SKIPs with its reason, status 0
t0=$SECONDS
env -u LD_LIBRARY_PATH REPORT_DIR="$WORK/report" PATH="/usr/bin:/bin" CUDA_VISIBLE_DEVICES= timeout 120 "$KITDIR/selftest" \
    > "$WORK/selftest.out" 2>&1
rc=$?
took=$((SECONDS - t0))
skips=$(grep -c '^SKIP: ' "$WORK/report/report.txt" 2> /dev/null)
if [ $rc = 0 ] && [ "${skips:-0}" -ge 5 ] && ! grep -q FAILED "$WORK/report/report.txt"; then
    ok "the kit's selftest without a GPU: $skips sections SKIP with their reasons, status 0, $took s"
else
    bad "the kit's selftest without a GPU: status $rc after $took s, $skips SKIPs" "$WORK/selftest.out"
fi
summary test_gpu_kit
