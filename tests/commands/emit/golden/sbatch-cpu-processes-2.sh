#!/bin/bash
# acceltrain launch --emit sbatch --target cpu: 1 node(s) x 2 process(es) a node: 2 process(es) x 1 CPU device(s).
# SIGTERM (the time limit's notice, a preemption, scontrol requeue): each process checkpoints and stops;
# exit 42 requeues the job, which resumes from the newest checkpoint; any other failure ends it.
# Submit: sbatch THIS.sh
#SBATCH --job-name=train
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --signal=TERM@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=train-%j.out

export JAX_COMPILATION_CACHE_DIR="${SLURM_SUBMIT_DIR}/acceltrain/compile-cache"
mkdir -p "/shared/ckpt" "$JAX_COMPILATION_CACHE_DIR"
command -v acceltrain > /dev/null || { echo "acceltrain: error: no acceltrain command on $(hostname): install acceltrain in the image or node (exit 127: the job fails, not restarted)" >&2; exit 127; }
srun --kill-on-bad-exit=1 acceltrain run --checkpoint-every '1 epochs' --checkpoint-dir /shared/ckpt --resume train.py
code=$?
if [ "$code" -eq 42 ]; then
    # Slurm ends this script as it requeues the job: one that exits first ends as failed, not requeued
    scontrol requeue "$SLURM_JOB_ID" && sleep 300
fi
exit "$code"
