#!/bin/bash
# osdp_gpt on a Slurm cluster: one MPI task per GPU, 8 GPUs per node, the
# planner's plan (--plan auto) for the GPU's device file.
#
# Submit from the build tree (sbatch options on the command line override the
# #SBATCH lines below; every variable of the script can be overridden from the
# environment):
#     sbatch slurm/osdp_gpt.sh                                  # 1 node x 8 GPUs
#     MODEL=input/models/gpt2_medium.ini STEPS=5000 sbatch --nodes=4 slurm/osdp_gpt.sh
#     PROFILE=1 sbatch slurm/osdp_gpt.sh         # measure a device file first, plan with it (a CUDA build)
#     sbatch --nodes=2 --time=04:00:00 --export=ALL,PLAN=zdp slurm/osdp_gpt.sh
#     sbatch --gpus-per-node=4 --ntasks-per-node=4 slurm/osdp_gpt.sh   # 4-GPU nodes
#     PP=auto TP=auto GLOBAL_BATCH=1536 TRAIN_ARGS="--recompute auto" sbatch --nodes=64 slurm/osdp_gpt.sh   # 3D search
#     PLAN=145b.plan TRAIN_ARGS="<the plan file's '# (train with ...)' options>" sbatch --nodes=192 slurm/osdp_gpt.sh
# The node count is sbatch's --nodes (1 unless given); the script reads what
# Slurm granted from SLURM_NNODES / SLURM_NTASKS.
# Output: Slurm writes the job log (stdout and stderr of every rank: the srun
# command line, the plan rank 0 prints at start, one progress line per step,
# errors) to osdp_<jobid>.out in the directory sbatch was run from
# (--output=DIR/osdp_%j.out puts it elsewhere); $OUT_DIR (default
# runs/<jobid>) gets steps.log, the machine-readable step=N loss=X ... lines;
# checkpoints go to $CKPT_DIR, always (a time-limit signal saves there).
# Resubmitting with RESUME=1 continues from the last save.
#
#SBATCH --job-name=osdp_gpt
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8          # one task per GPU
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8            # host threads per rank (data loading, host work)
#SBATCH --time=02:00:00
#SBATCH --signal=USR1@300            # 5 minutes before the limit: osdp saves a checkpoint and exits 0
#SBATCH --output=osdp_%j.out
#SBATCH --exclusive
set -euo pipefail

OSDP_SRC=${OSDP_SRC:-$SLURM_SUBMIT_DIR}            # the source tree (input/, scripts/, slurm/)
OSDP_BIN=${OSDP_BIN:-$SLURM_SUBMIT_DIR/osdp_gpt}
MODEL=${MODEL:-$OSDP_SRC/input/models/gpt2_small.ini}
DATA=${DATA:-$OSDP_SRC/input/data/addition.txt}
BACKEND=${BACKEND:-cuda}
PRECISION=${PRECISION:-bf16}           # bf16 weights and products (fp32 master, gradients); or fp32
PLAN=${PLAN:-auto}                     # auto (the planner), dp, zdp, or a plan file
# --plan auto's device file: empty picks the shipped file of this node's GPU
# (scripts/gpu_device_file; NAME_ib.ini over several nodes); PROFILE=1 measures
# one on the allocation first
DEVICE=${DEVICE:-}
PROFILE=${PROFILE:-0}
STEPS=${STEPS:-1000}
BATCH=${BATCH:-}                       # empty: the planner picks the micro-batch (--plan auto), else 8
GLOBAL_BATCH=${GLOBAL_BATCH:-}
MEM_LIMIT=${MEM_LIMIT:-}
PP=${PP:-}                             # pipeline stages: P, or auto (PLAN=auto: the 3D search over P, T, the stages);
TP=${TP:-}                             #   tensor-parallel degree: T or auto (PLAN=auto); empty: train's default, 1
# more train options, as words: a plan file's own "# (train with ...)" options (its mesh, stages, micro-batch and
# what its prediction assumed, e.g. --residual-dtype bf16), or --recompute auto, --schedule interleaved, ...
TRAIN_ARGS=${TRAIN_ARGS:-}
OUT_DIR=${OUT_DIR:-$SLURM_SUBMIT_DIR/runs/$SLURM_JOB_ID}
CKPT_DIR=${CKPT_DIR:-$SLURM_SUBMIT_DIR/checkpoints}
SAVE_EVERY=${SAVE_EVERY:-500}
RESUME=${RESUME:-0}
NUMA_BIND=${NUMA_BIND:-1}              # 1: each rank's CPUs on its GPU's NUMA node (slurm/gpu_numa_bind.sh)
CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-1}

# srun's PMI plugin must be one the MPI that osdp_gpt was linked with speaks:
# pmi2 for MPICH (and its derivatives), pmix for Open MPI; SRUN_MPI overrides.
# The choice is made from what `srun --mpi=list` offers on this cluster.
mpi_plugin() {
    local libs offered want p
    libs=$(ldd "$OSDP_BIN" 2> /dev/null || true)
    offered=$(srun --mpi=list 2>&1 | tr -s ' \t:,' '\n' || true)
    if grep -q -E 'libopen-pal|libmpi\.so\.4' <<< "$libs"; then want="pmix pmix_v5 pmix_v4 pmix_v3 pmi2"
    elif grep -q 'libmpi_cray' <<< "$libs"; then want="cray_shasta pmi2 pmix"
    else want="pmi2 pmix pmix_v5 pmix_v4 pmix_v3"; fi   # MPICH, Intel MPI, MVAPICH
    for p in $want; do
        if grep -q -x -- "$p" <<< "$offered"; then echo "$p"; return; fi
    done
    echo "osdp_gpt.sh: srun --mpi=list offers none of: $want; using Slurm's default plugin" >&2
}
SRUN_MPI=${SRUN_MPI:-$(mpi_plugin)}

# --- site NCCL settings (uncomment what your fabric needs) ---------------------
# export NCCL_SOCKET_IFNAME=ib0          # interface for bootstrap traffic
# export NCCL_IB_HCA=mlx5_0,mlx5_1       # InfiniBand adapters to use
# export NCCL_NET_GDR_LEVEL=PHB          # GPUDirect RDMA policy
# export NCCL_DEBUG=WARN                 # INFO to see rings/trees at start
# A collective (or NCCL's set-up, or teardown) that has not completed after this
# many seconds (a rank died or hangs) aborts the NCCL communicator and ends the
# job with a message naming what was pending; 0: no limit.
export OSDP_NCCL_TIMEOUT_S=${OSDP_NCCL_TIMEOUT_S:-600}
export OMP_NUM_THREADS=$CPUS_PER_TASK
export CUDA_DEVICE_ORDER=PCI_BUS_ID    # CUDA numbers the GPUs as nvidia-smi (and the NUMA binding) does

# srun from Slurm 22.05 on does not inherit sbatch's --cpus-per-task: pass it
srun_opts=(--kill-on-bad-exit=1 --cpus-per-task="$CPUS_PER_TASK" --gpu-bind=none)
[ -n "$SRUN_MPI" ] && srun_opts+=(--mpi="$SRUN_MPI")
launch=("$OSDP_BIN")
if [ "$NUMA_BIND" = 1 ]; then
    srun_opts+=(--cpu-bind=none)      # gpu_numa_bind.sh binds instead
    launch=(bash "$OSDP_SRC/slurm/gpu_numa_bind.sh" "$OSDP_BIN")
else
    srun_opts+=(--cpu-bind=cores)
fi
run_srun() {   # prints the command line into the job log, then runs it
    echo "osdp_gpt.sh: srun ${srun_opts[*]} ${launch[*]} $*"
    srun "${srun_opts[@]}" "${launch[@]}" "$@"
}

mkdir -p "$OUT_DIR" "$CKPT_DIR"
echo "osdp_gpt: job $SLURM_JOB_ID, $SLURM_NNODES node(s), ${SLURM_NTASKS:-?} tasks (${SLURM_NTASKS_PER_NODE:-?} per node), steps log in $OUT_DIR/steps.log"

# this node's GPU: its shipped device file (the two-level *_ib.ini over several nodes) and its dense
# bf16 peak, for --plan auto and for MFU (--peak-flops; PEAK_FLOPS overrides, 0: no MFU)
read -r GPU_DEVICE GPU_PEAK < <("$OSDP_SRC/scripts/gpu_device_file" "${SLURM_NNODES:-1}" || true) || true
PEAK_FLOPS=${PEAK_FLOPS:-${GPU_PEAK:-0}}
if [ "$PLAN" = auto ]; then
    if [ "$PROFILE" = 1 ]; then
        # a CPU-only binary would time the CPU backend and plan the GPUs with a CPU's figures.  The CUDA
        # backend is osdp_gpt's plugin (libosdp_cuda.so): `osdp_gpt --version` (no MPI, no CUDA loaded)
        # names the file it opens ($OSDP_CUDA_PLUGIN, beside the binary, or where `make install` put it)
        plugin=$("$OSDP_BIN" --version 2> /dev/null | sed -n 's/^CUDA plugin: //p' || true)
        plugin_file=$plugin
        case "$plugin" in none:*|"") plugin_file= ;; esac
        if [ "$BACKEND" = cuda ] && ! ldd "$OSDP_BIN" ${plugin_file:+"$plugin_file"} 2> /dev/null | grep -q -E 'libnccl|libcublas'; then
            echo "osdp_gpt.sh: PROFILE=1: $OSDP_BIN cannot profile the GPUs, no NCCL/cuBLAS in ldd of it and of its CUDA" \
                 "plugin (${plugin:-not named by osdp_gpt --version}): a CPU-only build? Rebuild with ./configure --with-cuda," \
                 "or set DEVICE=FILE" >&2
            exit 1
        fi
        # alpha/beta of the collectives over this allocation's ranks and nodes (NCCL), gamma per
        # operator type (CUDA events), mem_limit from the card after NCCL's warm-up (osdp_gpt profile --help)
        DEVICE=$OUT_DIR/device.ini
        run_srun profile --backend "$BACKEND" --model "$MODEL" --out "$DEVICE" --threads "$CPUS_PER_TASK"
    elif [ -z "$DEVICE" ]; then
        DEVICE=${GPU_DEVICE:-}
        if [ -z "$DEVICE" ]; then
            echo "osdp_gpt.sh: no GPU visible on $(hostname) to choose a device file: set DEVICE=FILE or PROFILE=1" >&2
            exit 1
        fi
    fi
    echo "osdp_gpt.sh: --plan auto with device file $DEVICE (rank 0 prints the plan below)"
fi

args=(train --model "$MODEL" --data "$DATA" --backend "$BACKEND" --precision "$PRECISION" --plan "$PLAN"
      --steps "$STEPS" --threads "$CPUS_PER_TASK" --log "$OUT_DIR/steps.log"
      --ckpt-dir "$CKPT_DIR" --save-every "$SAVE_EVERY")
[ "$PLAN" = auto ] && args+=(--device "$DEVICE")
[ "$PEAK_FLOPS" != 0 ] && args+=(--peak-flops "$PEAK_FLOPS")
[ -n "$BATCH" ] && args+=(--batch "$BATCH")
[ -n "$GLOBAL_BATCH" ] && args+=(--global-batch "$GLOBAL_BATCH")
[ -n "$MEM_LIMIT" ] && args+=(--mem-limit "$MEM_LIMIT")
[ -n "$PP" ] && args+=(--pp "$PP")
[ -n "$TP" ] && args+=(--tp "$TP")
if [ -n "$TRAIN_ARGS" ]; then
    read -r -a train_extra <<< "$TRAIN_ARGS"
    args+=("${train_extra[@]}")
fi
[ "$RESUME" = 1 ] && args+=(--resume)

# Every task sees all GPUs of its node and picks one by its node-local rank
# (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)); osdp checks MPI_Comm_size == SLURM_NTASKS.
run_srun "${args[@]}"
