#!/bin/bash
# slurm/osdp_gpt.sh under a fake srun (and fake nvidia-smi, numactl, ldd):
# every srun call's command line is recorded and checked —
#   - the checkpoint directory and --save-every are always passed (a time-limit
#     signal must find somewhere to save), and no `train --help` probe runs
#     the binary outside srun;
#   - the PMI plugin: pmi2 for the MPICH-linked osdp_gpt of this build, pmix
#     for an Open MPI one (fake ldd), whichever of them `srun --mpi=list`
#     offers, SRUN_MPI overriding;
#   - --cpus-per-task from SLURM_CPUS_PER_TASK, OMP_NUM_THREADS and --threads
#     alike;
#   - --plan auto by default with the GPU's device file (from nvidia-smi's
#     name), no --batch unless BATCH is set; PROFILE=1 runs `profile` over the
#     allocation first and plans with the file it writes;
#   - --peak-flops from scripts/gpu_device_file (989e12 for the H100, MFU in
#     the log), the one-level device file on 1 node and the two-level
#     h100_80gb_ib.ini on 4 (SLURM_NNODES), the H200's own 141 GB file;
#   - PROFILE=1 profiles --backend cuda with a CUDA build (fake ldd) and is
#     refused, before any srun, with a CPU-only binary;
#   - scripts/gpu_selftest without a GPU: every section SKIPs with its
#     reason, the report lands in REPORT_DIR, status 0;
#   - slurm/gpu_numa_bind.sh execs numactl on the NUMA node of the task's GPU
#     (a fake sysfs), or runs unbound with a reason;
# and shellcheck passes on the Slurm and GPU scripts (SKIPped, with the reason,
# where shellcheck is not installed).
set -u
. "$(dirname "$0")/../lib/test_lib.sh" slurm-work
FAKE="$WORK/bin"; mkdir -p "$FAKE" "$WORK/submit"
RECORD="$WORK/srun_calls"

cat > "$FAKE/srun" <<'FAKE_SRUN'
#!/bin/bash
# fake srun: --mpi=list prints $FAKE_MPI_LIST as Slurm does; any other call
# appends its arguments, one per line, then a line "--", to $RECORD
if [ "$*" = "--mpi=list" ]; then
    echo "MPI plugin types are..."
    for p in $FAKE_MPI_LIST; do printf '\t%s\n' "$p"; done
    exit 0
fi
{ printf '%s\n' "$@"; echo --; } >> "$RECORD"
FAKE_SRUN
cat > "$FAKE/nvidia-smi" <<'FAKE_SMI'
#!/bin/bash
gpu=${FAKE_GPU:-NVIDIA H100 80GB HBM3}
case "$*" in
    *name*) echo "$gpu"; echo "$gpu" ;;
    *pci.bus_id*) echo "00000000:1B:00.0"; echo "00000000:9A:00.0" ;;
    *) echo "GPU 0: NVIDIA H100 80GB HBM3" ;;
esac
FAKE_SMI
cat > "$FAKE/numactl" <<'FAKE_NUMACTL'
#!/bin/bash
echo "numactl $*"
FAKE_NUMACTL
chmod +x "$FAKE"/*

# run_job NAME [VAR=VALUE...]: the script as sbatch would run it; its srun
# calls go to $WORK/NAME.calls, its output to $WORK/NAME.out
run_job() {
    local name=$1; shift
    rm -f "$RECORD"
    env PATH="$FAKE:$PATH" RECORD="$RECORD" FAKE_MPI_LIST="${FAKE_MPI_LIST:-none pmi2 pmix pmix_v4}" \
        SLURM_SUBMIT_DIR="$WORK/submit" SLURM_JOB_ID=4242 SLURM_NNODES=1 SLURM_NTASKS=8 \
        SLURM_NTASKS_PER_NODE=8 SLURM_CPUS_PER_TASK=6 OSDP_SRC="$SRC" OSDP_BIN="$BIN" "$@" \
        bash "$SRC/slurm/osdp_gpt.sh" > "$WORK/$name.out" 2>&1
    local rc=$?
    touch "$RECORD"; mv "$RECORD" "$WORK/$name.calls"
    return $rc
}
# call NAME I: the arguments of srun call I (1-based), one per line
call() { awk -v want="$2" '$0 == "--" { n++; next } n + 1 == want' "$WORK/$1.calls"; }
ncalls() { grep -c -x -- -- "$WORK/$1.calls"; }
has() { call "$1" "$2" | grep -q -x -- "$3"; }
# value NAME I OPT: the argument after OPT in call I
value() { call "$1" "$2" | awk -v opt="$3" 'take { print; exit } $0 == opt { take = 1 }'; }

H100="$SRC/input/devices/h100_80gb.ini"
if run_job default; then
    c=$(ncalls default)
    [ "$c" = 1 ] && ok "default job: one srun call (no probe of the binary outside srun)" \
        || bad "default job: $c srun calls, want 1" "$WORK/default.out"
    has default 1 --mpi=pmi2 && ok "MPICH-linked osdp_gpt: srun --mpi=pmi2" \
        || bad "MPICH-linked osdp_gpt: no --mpi=pmi2 in the srun call" "$WORK/default.calls"
    has default 1 --cpus-per-task=6 && ok "srun gets --cpus-per-task=6 (SLURM_CPUS_PER_TASK)" \
        || bad "srun has no --cpus-per-task=6" "$WORK/default.calls"
    [ "$(value default 1 --threads)" = 6 ] && ok "train --threads 6" || bad "train --threads is not 6" "$WORK/default.calls"
    [ "$(value default 1 --ckpt-dir)" = "$WORK/submit/checkpoints" ] && [ -n "$(value default 1 --save-every)" ] \
        && ok "--ckpt-dir and --save-every always passed" || bad "no --ckpt-dir/--save-every" "$WORK/default.calls"
    [ -d "$WORK/submit/checkpoints" ] && ok "checkpoint directory created" || bad "no checkpoint directory"
    [ "$(value default 1 --plan)" = auto ] && [ "$(value default 1 --device)" = "$H100" ] \
        && ok "--plan auto --device h100_80gb.ini (nvidia-smi's H100)" \
        || bad "not --plan auto --device $H100" "$WORK/default.calls"
    has default 1 --batch && bad "--batch forced without BATCH" "$WORK/default.calls" || ok "no --batch without BATCH"
    has default 1 --resume && bad "--resume without RESUME=1" || ok "no --resume without RESUME=1"
    has default 1 "$SRC/slurm/gpu_numa_bind.sh" && has default 1 --cpu-bind=none \
        && ok "ranks start through gpu_numa_bind.sh (srun --cpu-bind=none)" \
        || bad "no NUMA binding wrapper" "$WORK/default.calls"
    grep -q "osdp_gpt.sh: srun .*--ckpt-dir" "$WORK/default.out" && grep -q "device file $H100" "$WORK/default.out" \
        && ok "the job log shows the srun command line and the device file" || bad "job log lacks the command line" "$WORK/default.out"
else
    bad "the job script failed under the fake srun" "$WORK/default.out"
fi

# --peak-flops and the device file by node count and GPU
[ "$(value default 1 --peak-flops)" = 989e12 ] && ok "1 node: --peak-flops 989e12 (the H100's dense bf16 peak, for MFU)" \
    || bad "no --peak-flops 989e12" "$WORK/default.calls"
run_job four SLURM_NNODES=4 SLURM_NTASKS=32
[ "$(value four 1 --device)" = "$SRC/input/devices/h100_80gb_ib.ini" ] && [ "$(value four 1 --peak-flops)" = 989e12 ] \
    && ok "4 nodes: --device h100_80gb_ib.ini (two levels), --peak-flops 989e12" \
    || bad "4 nodes: not the two-level file with the peak" "$WORK/four.calls"
run_job h200 FAKE_GPU="NVIDIA H200"
[ "$(value h200 1 --device)" = "$SRC/input/devices/h200_141gb.ini" ] && [ "$(value h200 1 --peak-flops)" = 989e12 ] \
    && grep -q '^mem_limit = 136G' "$SRC/input/devices/h200_141gb.ini" \
    && ok "H200: its own device file (136G of 141 GB), --peak-flops 989e12" || bad "H200: wrong file or peak" "$WORK/h200.calls"
run_job nopeak PEAK_FLOPS=0
has nopeak 1 --peak-flops && bad "PEAK_FLOPS=0 still passes --peak-flops" || ok "PEAK_FLOPS=0: no --peak-flops"

FAKE_MPI_LIST="none pmix pmix_v4" run_job pmix_only
has pmix_only 1 --mpi=pmix && ok "MPICH where srun offers no pmi2: --mpi=pmix" \
    || bad "no pmi2 offered: not --mpi=pmix" "$WORK/pmix_only.calls"
cat > "$FAKE/ldd" <<'FAKE_LDD'
#!/bin/bash
echo "	libmpi.so.40 => /opt/openmpi/lib/libmpi.so.40 (0x0000)"
echo "	libopen-pal.so.40 => /opt/openmpi/lib/libopen-pal.so.40 (0x0000)"
FAKE_LDD
chmod +x "$FAKE/ldd"
run_job openmpi
has openmpi 1 --mpi=pmix && ok "Open MPI-linked binary (fake ldd): --mpi=pmix" \
    || bad "Open MPI: not --mpi=pmix" "$WORK/openmpi.calls"
rm "$FAKE/ldd"
run_job override SRUN_MPI=pmi2 FAKE_MPI_LIST="pmix"
has override 1 --mpi=pmi2 && ok "SRUN_MPI=pmi2 overrides the choice" || bad "SRUN_MPI ignored" "$WORK/override.calls"

run_job batch BATCH=4 RESUME=1 PLAN=zdp NUMA_BIND=0
[ "$(value batch 1 --batch)" = 4 ] && has batch 1 --resume && [ "$(value batch 1 --plan)" = zdp ] \
    && ! has batch 1 --device && has batch 1 --cpu-bind=cores && [ -n "$(value batch 1 --ckpt-dir)" ] \
    && ok "BATCH=4 RESUME=1 PLAN=zdp NUMA_BIND=0: --batch 4 --resume --plan zdp, no --device, --cpu-bind=cores" \
    || bad "BATCH/RESUME/PLAN/NUMA_BIND not honoured" "$WORK/batch.calls"

# the 3D search (PP, TP) and more train options (TRAIN_ARGS, as words: a plan file's "train with" options)
run_job mesh3d PP=auto TP=auto GLOBAL_BATCH=64 TRAIN_ARGS="--recompute auto  --residual-dtype bf16"
[ "$(value mesh3d 1 --pp)" = auto ] && [ "$(value mesh3d 1 --tp)" = auto ] && [ "$(value mesh3d 1 --global-batch)" = 64 ] \
    && [ "$(value mesh3d 1 --recompute)" = auto ] && [ "$(value mesh3d 1 --residual-dtype)" = bf16 ] \
    && [ "$(value mesh3d 1 --plan)" = auto ] && [ -n "$(value mesh3d 1 --device)" ] \
    && ok "PP=auto TP=auto TRAIN_ARGS='--recompute auto  --residual-dtype bf16': train --pp auto --tp auto --recompute auto --residual-dtype bf16 (one word each)" \
    || bad "PP/TP/TRAIN_ARGS not passed" "$WORK/mesh3d.calls"
run_job planfile PLAN="$WORK/p.plan" TRAIN_ARGS="--pp 2 --stages 0:7,7:14 --schedule 1f1b --tp 2 --batch 1 --global-batch 8"
[ "$(value planfile 1 --plan)" = "$WORK/p.plan" ] && [ "$(value planfile 1 --stages)" = 0:7,7:14 ] \
    && [ "$(value planfile 1 --tp)" = 2 ] && [ "$(value planfile 1 --batch)" = 1 ] && ! has planfile 1 --device \
    && ok "PLAN=FILE TRAIN_ARGS='<its train line>': --plan FILE --pp 2 --stages 0:7,7:14 --tp 2 --batch 1, no --device" \
    || bad "PLAN=FILE with its train options" "$WORK/planfile.calls"

# PROFILE=1: a CUDA build (fake ldd: NCCL, cuBLAS) profiles the GPUs; a CPU-only one is refused
cat > "$FAKE/ldd" <<'FAKE_LDD'
#!/bin/bash
echo "	libmpich.so.12 => /usr/lib/libmpich.so.12 (0x0000)"
[ "${FAKE_CPU_ONLY:-0}" = 1 ] || echo "	libnccl.so.2 => /usr/local/cuda/lib64/libnccl.so.2 (0x0000)"
# FAKE_NCCL_IN_PLUGIN=1: NCCL only in a CUDA plugin named on the command line (as the real build links it)
for f in "$@"; do
    [ "${FAKE_NCCL_IN_PLUGIN:-0}" = 1 ] && [ "${f##*/}" = libosdp_cuda.so ] && [ -e "$f" ] && echo "$f:" \
        && echo "	libnccl.so.2 => /usr/local/cuda/lib64/libnccl.so.2 (0x0000)"
done
exit 0
FAKE_LDD
chmod +x "$FAKE/ldd"
# the plugin found without OSDP_CUDA_PLUGIN: the one `osdp_gpt --version` names (beside the binary in a
# build tree; an installed binary's in $(pkglibdir), where the loader looks next)
if [ -e "$BUILD/libosdp_cuda.so" ]; then
    if env -u OSDP_CUDA_PLUGIN "$BIN" --version | grep -q -x "CUDA plugin: $BUILD/libosdp_cuda.so"; then
        ok "osdp_gpt --version names the plugin beside it: $BUILD/libosdp_cuda.so"
    else bad "osdp_gpt --version does not name $BUILD/libosdp_cuda.so: $("$BIN" --version | tail -1)"; fi
    (unset OSDP_CUDA_PLUGIN; run_job profile_plugin PROFILE=1 FAKE_CPU_ONLY=1 FAKE_NCCL_IN_PLUGIN=1)
    [ "$(ncalls profile_plugin)" = 2 ] && has profile_plugin 1 profile \
        && ok "PROFILE=1, NCCL in the plugin only, no OSDP_CUDA_PLUGIN: the script finds the plugin and profiles" \
        || bad "PROFILE=1 did not find the CUDA plugin by itself" "$WORK/profile_plugin.out"
    mkdir -p "$WORK/inst/bin"; cp "$BIN" "$WORK/inst/bin/osdp_gpt"
    env -u OSDP_CUDA_PLUGIN "$WORK/inst/bin/osdp_gpt" --version > "$WORK/inst_version.out" 2>&1
    installdir=$(sed -n 's/^CUDA plugin: .*(looked for [^ ]* and \(.*\)\/libosdp_cuda\.so;.*/\1/p' "$WORK/inst_version.out")
    if [ -n "$installdir" ] && [ "$installdir" != "$WORK/inst/bin" ]; then
        ok "a binary without the plugin beside it looks in the install directory next ($installdir)"
    elif grep -q -x "CUDA plugin: .*/libosdp_cuda.so" "$WORK/inst_version.out"; then
        ok "a binary without the plugin beside it finds the installed one: $(sed -n 's/^CUDA plugin: //p' "$WORK/inst_version.out")"
    else bad "osdp_gpt --version away from the build tree" "$WORK/inst_version.out"; fi
    (unset OSDP_CUDA_PLUGIN; run_job profile_noplugin PROFILE=1 FAKE_CPU_ONLY=1 FAKE_NCCL_IN_PLUGIN=1 OSDP_BIN="$WORK/inst/bin/osdp_gpt")
    if [ -z "$installdir" ]; then :   # a plugin is installed: the script found it (the profile runs)
    elif [ "$(ncalls profile_noplugin)" = 0 ] && grep -q "CUDA plugin (none: .*not found" "$WORK/profile_noplugin.out"; then
        ok "PROFILE=1 where no plugin is found: refused before srun, saying what the binary looked for"
    else bad "PROFILE=1 without a plugin" "$WORK/profile_noplugin.out"; fi
else
    echo "SKIP: the plugin checks of PROFILE=1 (a build without CUDA: no $BUILD/libosdp_cuda.so)"
fi
run_job profile PROFILE=1
prof="$WORK/submit/runs/4242/device.ini"
if [ "$(ncalls profile)" = 2 ] && has profile 1 profile && [ "$(value profile 1 --out)" = "$prof" ] \
    && [ "$(value profile 1 --backend)" = cuda ] && has profile 2 train && [ "$(value profile 2 --device)" = "$prof" ]; then
    ok "PROFILE=1: srun profile --backend cuda --out runs/4242/device.ini, then train --device with it"
else
    bad "PROFILE=1 did not profile the GPUs then plan with the file" "$WORK/profile.calls"
fi
if run_job profile_cpu PROFILE=1 FAKE_CPU_ONLY=1; then
    bad "PROFILE=1 with a CPU-only binary was not refused" "$WORK/profile_cpu.out"
else
    grep -q "CPU-only build" "$WORK/profile_cpu.out" && [ "$(ncalls profile_cpu)" = 0 ] \
        && ok "PROFILE=1 with a CPU-only binary: refused before any srun, naming the rebuild" \
        || bad "PROFILE=1, CPU-only: unclear refusal" "$WORK/profile_cpu.out"
fi
rm "$FAKE/ldd"

# the GPU self-test where no GPU is: each section SKIPs with its reason, the report in REPORT_DIR, status 0
CUDA_VISIBLE_DEVICES= REPORT_DIR="$WORK/selftest" bash "$SRC/scripts/gpu_selftest" > "$WORK/selftest.out" 2>&1
rc=$?
skips=$(grep -c '^SKIP: no GPU' "$WORK/selftest/report.txt" 2> /dev/null)
[ $rc = 0 ] && [ "${skips:-0}" -ge 7 ] && grep -q "failed sections: 0" "$WORK/selftest/report.txt" \
    && ok "scripts/gpu_selftest without a GPU: $skips sections SKIP with the reason, report in REPORT_DIR, status 0" \
    || bad "gpu_selftest without a GPU: status $rc, $skips SKIPs" "$WORK/selftest.out"

# no GPU visible on the batch host and no DEVICE: a clear error, no srun
mv "$FAKE/nvidia-smi" "$FAKE/nvidia-smi.off"
if run_job nogpu; then
    bad "no GPU and no DEVICE: the job did not fail" "$WORK/nogpu.out"
else
    grep -q "set DEVICE=FILE or PROFILE=1" "$WORK/nogpu.out" && [ "$(ncalls nogpu)" = 0 ] \
        && ok "no GPU, no DEVICE: fails before srun, naming DEVICE and PROFILE" || bad "no GPU: unclear failure" "$WORK/nogpu.out"
fi
mv "$FAKE/nvidia-smi.off" "$FAKE/nvidia-smi"

# the NUMA binding of task 1: GPU 1 (bus 9a) is on node 1 of a fake sysfs
sys="$WORK/sys"
mkdir -p "$sys/bus/pci/devices/0000:1b:00.0" "$sys/bus/pci/devices/0000:9a:00.0" \
    "$sys/devices/system/node/node0" "$sys/devices/system/node/node1"
echo 0 > "$sys/bus/pci/devices/0000:1b:00.0/numa_node"
echo 1 > "$sys/bus/pci/devices/0000:9a:00.0/numa_node"
echo 0-23 > "$sys/devices/system/node/node0/cpulist"; echo 24-47 > "$sys/devices/system/node/node1/cpulist"
got=$(PATH="$FAKE:$PATH" OSDP_SYSFS="$sys" SLURM_LOCALID=1 bash "$SRC/slurm/gpu_numa_bind.sh" echo run 2>&1)
[ "$got" = "numactl --cpunodebind=1 --preferred=1 echo run" ] && ok "task 1 bound to GPU 1's NUMA node 1" \
    || bad "task 1's binding: '$got'"
got=$(PATH="$FAKE:$PATH" OSDP_SYSFS="$sys" SLURM_LOCALID=2 bash "$SRC/slurm/gpu_numa_bind.sh" echo run 2>&1)
[ "$got" = "numactl --cpunodebind=0 --preferred=0 echo run" ] && ok "task 2 (GPU 2 mod 2 = 0) on node 0" \
    || bad "task 2's binding: '$got'"
echo -1 > "$sys/bus/pci/devices/0000:9a:00.0/numa_node"
got=$(PATH="$FAKE:$PATH" OSDP_SYSFS="$sys" SLURM_LOCALID=1 SLURM_PROCID=0 bash "$SRC/slurm/gpu_numa_bind.sh" echo run 2>&1)
[ "$got" = "gpu_numa_bind: no NUMA binding: GPU 0000:9a:00.0 has no NUMA node in $sys
run" ] && ok "no NUMA node: runs unbound and says why" || bad "unbound run: '$got'"

if command -v shellcheck > /dev/null 2>&1; then
    if shellcheck "$SRC/slurm/osdp_gpt.sh" "$SRC/slurm/gpu_numa_bind.sh" "$SRC/scripts/gpu_device_file" \
           "$SRC/scripts/bench_gpu" "$SRC/scripts/gpu_selftest" "$SRC/scripts/gpu_kit" > "$WORK/shellcheck.txt" 2>&1; then
        ok "shellcheck: slurm/*.sh, scripts/gpu_device_file, bench_gpu, gpu_selftest, gpu_kit"
    else
        bad "shellcheck found problems" "$WORK/shellcheck.txt"
    fi
else
    echo "SKIP: shellcheck not installed (apt-get install shellcheck): the scripts were not linted"
fi
summary test_slurm
