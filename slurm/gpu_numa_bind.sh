#!/bin/bash
# Runs "$@" with its CPUs (and preferred memory) on the NUMA node of the GPU
# this Slurm task will use: srun starts it once per task.  osdp_gpt picks GPU
# (node-local rank mod visible GPUs); the node-local rank is SLURM_LOCALID
# (tasks of a node in rank order, as MPI_Comm_split_type orders them), and
# CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA number the GPUs as nvidia-smi does.
# The GPU's node comes from sysfs (/sys/bus/pci/devices/BUS/numa_node; the
# root is $OSDP_SYSFS, for tests).  numactl when installed, else taskset.
# Without a GPU, a node (-1: no NUMA) or either tool, "$@" runs unbound, and
# task 0 says why in the job log.
set -u
sysfs=${OSDP_SYSFS:-/sys}
local_rank=${SLURM_LOCALID:-0}
mapfile -t buses < <(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2> /dev/null)
if [ "${#buses[@]}" -eq 0 ]; then
    why="nvidia-smi lists no GPU"
else
    bus=${buses[$((local_rank % ${#buses[@]}))]}
    # nvidia-smi: 00000000:17:00.0 (8-digit domain); sysfs: 0000:17:00.0
    bus=$(echo "${bus: -12}" | tr 'A-F' 'a-f')
    node=$(cat "$sysfs/bus/pci/devices/$bus/numa_node" 2> /dev/null || echo -1)
    cpus=$(cat "$sysfs/devices/system/node/node$node/cpulist" 2> /dev/null || true)
    if [ "$node" -lt 0 ] || [ -z "$cpus" ]; then
        why="GPU $bus has no NUMA node in $sysfs"
    elif command -v numactl > /dev/null 2>&1; then
        exec numactl --cpunodebind="$node" --preferred="$node" "$@"
    elif command -v taskset > /dev/null 2>&1; then
        exec taskset -c "$cpus" "$@"
    else
        why="neither numactl nor taskset is installed"
    fi
fi
[ "${SLURM_PROCID:-0}" = 0 ] && echo "gpu_numa_bind: no NUMA binding: $why" >&2
exec "$@"
