# acceltrain launch --emit ray --target tpu-v5e-16: 4 process(es) x 4 chips, one Ray Train worker each (one on each host of a v5litepod-16 slice); one JAX job.
# Submit: ray job submit --working-dir . -- python THIS.py (or `python THIS.py` on the head node).
# Ray Train restarts the whole job on any failure, up to max_failures times; each restart resumes
# from the newest checkpoint. /mnt/shared must be one folder every node sees (NFS, a bucket).
from acceltrain.commands.ray_job import run_job

raise SystemExit(run_job(
    ['acceltrain', 'run', '--checkpoint-dir', '/mnt/shared/checkpoints', '--resume', 'train.py'],
    workers=4,
    max_failures=3,
    name='train',
    resources_per_worker={'TPU': 4},
    env={'JAX_COMPILATION_CACHE_DIR': '/mnt/shared/compile-cache'},
))
