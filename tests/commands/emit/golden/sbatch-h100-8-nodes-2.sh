#!/bin/bash
# acceltrain launch --emit sbatch --target h100-8: 2 node(s) x 8 GPUs, one process a node.
# SIGTERM (the time limit's notice, a preemption, scontrol requeue): each process checkpoints and stops;
# exit 42 requeues the job, which resumes from the newest checkpoint; any other failure ends it.
# Submit: sbatch THIS.sh
#SBATCH --job-name=train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --signal=TERM@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=train-%j.out

export JAX_COMPILATION_CACHE_DIR="${SLURM_SUBMIT_DIR}/acceltrain/compile-cache"
# JAX's Slurm detection gives a task only the GPU of its SLURM_LOCALID (one task a GPU); one task a node
export JAX_LOCAL_DEVICE_IDS=0,1,2,3,4,5,6,7  # drives all 8
mkdir -p "${SLURM_SUBMIT_DIR}/acceltrain/checkpoints" "$JAX_COMPILATION_CACHE_DIR"
command -v acceltrain > /dev/null || { echo "acceltrain: error: no acceltrain command on $(hostname): install acceltrain in the image or node (exit 127: the job fails, not restarted)" >&2; exit 127; }
srun --kill-on-bad-exit=1 acceltrain run --checkpoint-dir "${SLURM_SUBMIT_DIR}/acceltrain/checkpoints" --resume train.py --epochs 3
code=$?
if [ "$code" -eq 42 ]; then
    # Slurm ends this script as it requeues the job: one that exits first ends as failed, not requeued
    scontrol requeue "$SLURM_JOB_ID" && sleep 300
fi
exit "$code"
