# acceltrain launch --emit ray --target cpu: 2 process(es) x 1 CPU device(s), one Ray Train worker each (2 node(s) x 1 process(es)); one JAX job.
# Submit: ray job submit --working-dir . -- python THIS.py (or `python THIS.py` on the head node).
# Ray Train restarts the whole job on any failure, up to max_failures times; each restart resumes
# from the newest checkpoint. /mnt/shared must be one folder every node sees (NFS, a bucket).
from acceltrain.commands.ray_job import run_job

raise SystemExit(run_job(
    ['acceltrain', 'run', '--checkpoint-every', '10 steps', '--checkpoint-dir', '/nfs/ckpt',
     '--resume', 'train.py', '--epochs', '3'],
    workers=2,
    max_failures=10,
    name='train',
    env={'JAX_COMPILATION_CACHE_DIR': '/mnt/shared/compile-cache'},
))
