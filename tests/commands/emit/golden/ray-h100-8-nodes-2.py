# acceltrain launch --emit ray --target h100-8: 2 process(es) x 8 GPUs, one Ray Train worker each (one a GPU box); one JAX job.
# Submit: ray job submit --working-dir . -- python THIS.py (or `python THIS.py` on the head node).
# Ray Train restarts the whole job on any failure, up to max_failures times; each restart resumes
# from the newest checkpoint. /mnt/shared must be one folder every node sees (NFS, a bucket).
from acceltrain.commands.ray_job import run_job

raise SystemExit(run_job(
    ['acceltrain', 'run', '--checkpoint-dir', '/mnt/shared/checkpoints', '--resume', 'train.py'],
    workers=2,
    max_failures=10,
    name='mnist',
    gpus_per_worker=8,
    env={'JAX_COMPILATION_CACHE_DIR': '/mnt/shared/compile-cache'},
))
