"""A Ray job's driver, as `acceltrain launch --emit ray` writes it (emit/ray.py): run on a Ray cluster (`ray job
submit --working-dir . -- python JOB.py`, or `python JOB.py` on its head node), it starts N Ray Train workers as
one JAX job, each running the unchanged script under `acceltrain run` in a child process, and leaves restarts to
Ray Train's own failure handling: `FailureConfig(max_failures=N)`.

When a worker dies (its node lost, its process killed) or its `acceltrain run` fails (exit 42 after a notice,
anything else), Ray Train ends the whole worker group and starts it again, up to max_failures times; each new
`acceltrain run --resume` continues from the newest checkpoint in the shared --checkpoint-dir, so the job ends
with the weights of a run never stopped (tests/commands/test_ray_job.py, with a real local Ray cluster).

Why a child process, not the script inside Ray's worker: Ray Train runs the training function in a thread of its
worker actor, where no signal handler can be set (acceltrain's notices need the main thread), and JAX's devices
and jax.distributed belong to one process for its life. A child has its own main thread and its own JAX; Ray's
worker only starts it, waits, and dies with it (and it with the worker: PR_SET_PDEATHSIG).

The child learns its place in the job from three variables (environments.RayWorker): Ray Train's world rank and
size (ray.train.get_context()) and rank 0's address, which rank 0 picks and Ray broadcasts
(ray.train.collective.broadcast_from_rank_zero). Ray is imported only inside run_job and the worker's function.
"""

import os
import signal
import subprocess
import sys

ENV_RANK = "ACCELTRAIN_RAY_WORLD_RANK"
ENV_SIZE = "ACCELTRAIN_RAY_WORLD_SIZE"
ENV_COORDINATOR = "ACCELTRAIN_RAY_COORDINATOR"


def run_job(command, *, workers: int, max_failures: int, name: str, cpus_per_worker: float = 1,
            gpus_per_worker: int = 0, resources_per_worker: dict | None = None, env: dict | None = None,
            storage_path: str | None = None) -> int:
    """Run `command` (`acceltrain run ... SCRIPT ARGS`) on `workers` Ray Train workers as one JAX job, restarted by
    Ray Train up to `max_failures` times. Returns 0 once every worker's run succeeded; raises Ray's error when the
    job failed past its restarts. `env`: variables for every worker's run (the compile cache's folder)."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    resources = {"CPU": cpus_per_worker, **({"GPU": gpus_per_worker} if gpus_per_worker else {}),
                 **(resources_per_worker or {})}
    trainer = DataParallelTrainer(
        _worker, train_loop_config={"command": list(command), "env": dict(env or {})},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=bool(gpus_per_worker),
                                     resources_per_worker=resources),
        run_config=RunConfig(name=name, storage_path=storage_path,
                             failure_config=FailureConfig(max_failures=max_failures)),
    )
    trainer.fit()  # raises ray.train.TrainingFailedError once the restarts are spent
    return 0


def _worker(config: dict) -> None:
    """One Ray Train worker: start `acceltrain run` as process `rank` of the job, wait for it; a failure raises, which
    Ray Train answers by restarting the worker group (FailureConfig)."""
    import ray.train
    from ray.train import collective

    context = ray.train.get_context()
    rank, size = context.get_world_rank(), context.get_world_size()
    coordinator = collective.broadcast_from_rank_zero(_free_address() if rank == 0 else None)
    child = subprocess.Popen(child_command(config["command"]),
                             env=child_environment(os.environ, config["env"], rank, size, coordinator),
                             preexec_fn=_die_with_parent)
    code = child.wait()
    if code != 0:
        raise RuntimeError(f"acceltrain run exited with code {code} on Ray Train worker {rank} of {size}")


def child_command(command) -> list[str]:
    """`acceltrain ...` as this worker's Python runs it (`python -m acceltrain ...`): the interpreter Ray runs, which
    has acceltrain, whatever the PATH of a Ray worker holds."""
    command = [str(part) for part in command]
    return [sys.executable, "-m", "acceltrain", *command[1:]] if command[:1] == ["acceltrain"] else command


def child_environment(base, extra: dict, rank: int, size: int, coordinator: str) -> dict:
    """The worker's environment, `extra`, and the job as environments.RayWorker reads it."""
    return {**base, **extra, ENV_RANK: str(rank), ENV_SIZE: str(size), ENV_COORDINATOR: coordinator}


def _free_address() -> str:
    """This node's address (as Ray knows it) and a port free on it now: rank 0's jax.distributed coordinator."""
    import socket

    import ray.util

    with socket.socket() as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    return f"{ray.util.get_node_ip_address()}:{port}"


def _die_with_parent() -> None:
    """In the child, before it runs: SIGKILL when the thread that started it ends (Ray killed its worker), so no
    `acceltrain run` outlives the worker group Ray Train restarts. Linux only; elsewhere the child keeps running."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
