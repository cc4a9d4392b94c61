#!/bin/bash
# osdp_gpt on a Slurm cluster: one MPI task per GPU, 8 GPUs per node.
#
# Submit (sbatch options on the command line override the #SBATCH lines below;
# every variable of the script can be overridden from the environment):
#     sbatch slurm/osdp_gpt.sh                                  # 1 node x 8 GPUs
#     MODEL=input/models/gpt2_medium.ini STEPS=5000 sbatch --nodes=4 slurm/osdp_gpt.sh
#     sbatch --nodes=2 --time=04:00:00 --export=ALL,PLAN=zdp slurm/osdp_gpt.sh
#     sbatch --gpus-per-node=4 --ntasks-per-node=4 slurm/osdp_gpt.sh   # 4-GPU nodes
# The node count is sbatch's --nodes (1 unless given); the script reads what
# Slurm granted from SLURM_NNODES / SLURM_NTASKS.
# Output: Slurm writes the job log (stdout and stderr of every rank: the plan,
# one progress line per step from rank 0, errors) to osdp_<jobid>.out in the
# directory sbatch was run from (--output=DIR/osdp_%j.out puts it elsewhere);
# $OUT_DIR (default runs/<jobid>) gets steps.log, the machine-readable
# step=N loss=X ... lines; checkpoints go to $CKPT_DIR.  Resubmitting with
# RESUME=1 continues from the last save.
#
#SBATCH --job-name=osdp_gpt
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8          # one task per GPU
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8            # host threads per rank (data, optimizer on CPU backend)
#SBATCH --time=02:00:00
#SBATCH --signal=USR1@300            # 5 minutes before the limit: osdp saves a checkpoint and exits 0
#SBATCH --output=osdp_%j.out
#SBATCH --exclusive
set -euo pipefail

OSDP_BIN=${OSDP_BIN:-$SLURM_SUBMIT_DIR/osdp_gpt}
MODEL=${MODEL:-$SLURM_SUBMIT_DIR/input/models/gpt2_small.ini}
DATA=${DATA:-$SLURM_SUBMIT_DIR/input/data/addition.txt}
BACKEND=${BACKEND:-cuda}
PRECISION=${PRECISION:-bf16}           # bf16 weights and products (fp32 master, gradients); or fp32
PLAN=${PLAN:-dp}
STEPS=${STEPS:-1000}
BATCH=${BATCH:-8}
GLOBAL_BATCH=${GLOBAL_BATCH:-}
MEM_LIMIT=${MEM_LIMIT:-}
OUT_DIR=${OUT_DIR:-$SLURM_SUBMIT_DIR/runs/$SLURM_JOB_ID}
CKPT_DIR=${CKPT_DIR:-$SLURM_SUBMIT_DIR/checkpoints}
SAVE_EVERY=${SAVE_EVERY:-500}
RESUME=${RESUME:-0}
# PMIx is the default for Open MPI and MPICH built with it; MPICH without PMIx needs pmi2.
SRUN_MPI=${SRUN_MPI:-pmix}

# --- site NCCL settings (uncomment what your fabric needs) ---------------------
# export NCCL_SOCKET_IFNAME=ib0          # interface for bootstrap traffic
# export NCCL_IB_HCA=mlx5_0,mlx5_1       # InfiniBand adapters to use
# export NCCL_NET_GDR_LEVEL=PHB          # GPUDirect RDMA policy
# export NCCL_DEBUG=WARN                 # INFO to see rings/trees at start
# A collective that has not completed after this many seconds (a rank died or
# hangs) aborts the NCCL communicator and ends the job with a message; 0: no limit.
export OSDP_NCCL_TIMEOUT_S=${OSDP_NCCL_TIMEOUT_S:-600}
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}

mkdir -p "$OUT_DIR" "$CKPT_DIR"
args=(train --model "$MODEL" --data "$DATA" --backend "$BACKEND" --precision "$PRECISION" --plan "$PLAN"
      --steps "$STEPS" --batch "$BATCH" --threads "$OMP_NUM_THREADS" --log "$OUT_DIR/steps.log")
[ -n "$GLOBAL_BATCH" ] && args+=(--global-batch "$GLOBAL_BATCH")
[ -n "$MEM_LIMIT" ] && args+=(--mem-limit "$MEM_LIMIT")
if "$OSDP_BIN" train --help 2>/dev/null | grep -q -- --ckpt-dir; then
    args+=(--ckpt-dir "$CKPT_DIR" --save-every "$SAVE_EVERY")
    [ "$RESUME" = 1 ] && args+=(--resume)
fi

echo "osdp_gpt: job $SLURM_JOB_ID, $SLURM_NNODES node(s), ${SLURM_NTASKS:-?} tasks (${SLURM_NTASKS_PER_NODE:-?} per node), steps log in $OUT_DIR/steps.log"
# Every task sees all GPUs of its node and picks one by its node-local rank
# (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)); osdp checks MPI_Comm_size == SLURM_NTASKS.
srun --mpi="$SRUN_MPI" --kill-on-bad-exit=1 --cpu-bind=cores --gpu-bind=none \
     "$OSDP_BIN" "${args[@]}"
