"""Each engine's in-job contract: which variables it sets in a process, and what they say of the job.

A class per engine reads a plain Mapping (the environment) and answers one question: is this process one of
that engine's job, and if so, how many processes, which one, and where process 0 listens. Nothing else: no
I/O, no framework. `cluster._detect` asks them in its documented order; the tests feed them environments
recorded from each engine's documentation (tests/engine_environments.py).

The variables, and where each engine documents them (looked up 2026-12-03):
- Pathways on Cloud: "the 'proxy' JAX backend ... by setting the JAX_PLATFORMS=proxy environment variable",
  and "jax.process_index() is always 0": one process drives every chip (docs.cloud.google.com/ai-hypercomputer/
  docs/workloads/pathways-on-cloud/porting-jax-workloads).
- Kubeflow Trainer's JAX runtime injects JAX_NUM_PROCESSES, JAX_PROCESS_ID and JAX_COORDINATOR_ADDRESS into
  every trainer container (kubeflow/website content/en/docs/components/trainer/user-guides/jax.md).
- Kubernetes Indexed Jobs (so every Job of a JobSet) set JOB_COMPLETION_INDEX; a pod's hostname is
  `<job name>-<index>`, and a JobSet's subdomain defaults to its name (kubernetes-sigs/jobset
  pkg/controllers/jobset_controller.go::GetSubdomain; JAX's own k8s_cluster.py reaches process 0 at
  `<job name>-0.<jobset name>`). The JobSet's name reaches the pod through the downward API, as JobSet's
  examples do (JOBSET_NAME from the `jobset.sigs.k8s.io/jobset-name` annotation); the Job's completions
  are in its spec only, so the JobSet acceltrain emits copies them into JOB_COMPLETIONS.
- SkyPilot exports SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS (one IP a line, the head first) and
  SKYPILOT_NUM_NODES to every node's `run` (docs.skypilot.co running-jobs/distributed-jobs.html).
- A Ray job `acceltrain launch --emit ray` wrote (commands/ray_job.py): each Ray Train worker starts `acceltrain
  run` as a child process and passes it Ray Train's own context (ray.train.get_context(): get_world_rank(),
  get_world_size()) and rank 0's address, broadcast by Ray (ray.train.collective.broadcast_from_rank_zero), as
  the three ACCELTRAIN_RAY_* variables: Ray sets no variable of its own that names a worker's rank.
"""

from collections.abc import Mapping
from dataclasses import dataclass

# Where process 0 listens when the engine names a host but no port: JAX's own default for a Kubernetes job
# (jax/_src/clusters/k8s_cluster.py), and JAX_COORDINATOR_PORT overrides it there as here.
COORDINATOR_PORT = 55527


@dataclass(frozen=True)
class Found:
    """What an engine's variables say of this process's job. None: the engine does not say."""

    num_processes: int | None
    process_id: int | None
    coordinator: str | None  # "host:port" of process 0
    reason: str


def _port(env: Mapping[str, str]) -> str:
    return env.get("JAX_COORDINATOR_PORT") or str(COORDINATOR_PORT)


class Pathways:
    """Pathways's proxy backend: one Python process drives every chip of the job; no jax.distributed."""

    source = "pathways"
    names = ("JAX_BACKEND_TARGET", "", "")

    def read(self, env: Mapping[str, str]) -> Found | None:
        if "proxy" not in env.get("JAX_PLATFORMS", "").split(","):
            return None
        target = env.get("JAX_BACKEND_TARGET")
        where = f", JAX_BACKEND_TARGET={target}" if target else ""
        return Found(1, 0, None, f"Pathways's proxy backend (JAX_PLATFORMS=proxy{where}): one process drives "
                                 "every chip, so no jax.distributed")


class Kubeflow:
    """Kubeflow Trainer's JAX runtime: the three JAX_* variables, as JAX itself names them."""

    source = "kubeflow"
    names = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")

    def read(self, env: Mapping[str, str]) -> Found | None:
        coordinator, count, index = (env.get(name) for name in self.names)
        if count is None and index is None:
            return None  # JAX_COORDINATOR_ADDRESS alone is JAX's own setting, not a job
        return Found(count, index, coordinator, "set by JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and "
                                                "JAX_PROCESS_ID (Kubeflow Trainer's JAX runtime)")


class IndexedJob:
    """A pod of a Kubernetes Indexed Job, and so of a JobSet: its completion index, its Job's pod hostnames."""

    source = "jobset"
    names = ("HOSTNAME and JOBSET_NAME", "JOB_COMPLETIONS", "JOB_COMPLETION_INDEX")

    def read(self, env: Mapping[str, str]) -> Found | None:
        index = env.get("JOB_COMPLETION_INDEX")
        if index is None:
            return None
        hostname, jobset = env.get("HOSTNAME", ""), env.get("JOBSET_NAME")
        job, _, own = hostname.rpartition("-")
        if not env.get("JOB_COMPLETIONS") or not jobset or not job or own != str(index).strip():
            # Many Indexed Jobs are N independent tasks, not one job: one process, with the way to join them.
            return Found(1, 0, None, f"a Kubernetes Indexed Job pod (JOB_COMPLETION_INDEX={index}) without "
                                     "JOB_COMPLETIONS and JOBSET_NAME: one process (for one JAX job over the "
                                     "pods, set both, as `acceltrain launch --emit jobset` does)")
        count = env["JOB_COMPLETIONS"]
        return Found(count, index, f"{job}-0.{jobset}:{_port(env)}",
                     f"a JobSet pod ({hostname}: JOB_COMPLETION_INDEX={index} of JOB_COMPLETIONS={count})")


class SkyPilot:
    """A SkyPilot task's node: rank, the nodes' IPs (the head first), their count."""

    source = "skypilot"
    names = ("SKYPILOT_NODE_IPS", "SKYPILOT_NUM_NODES", "SKYPILOT_NODE_RANK")

    def read(self, env: Mapping[str, str]) -> Found | None:
        if "SKYPILOT_NODE_RANK" not in env or "SKYPILOT_NUM_NODES" not in env:
            return None
        ips = [line.strip() for line in env.get("SKYPILOT_NODE_IPS", "").splitlines() if line.strip()]
        head = f"{ips[0]}:{_port(env)}" if ips else None
        count = env["SKYPILOT_NUM_NODES"]
        return Found(count, env["SKYPILOT_NODE_RANK"], head,
                     f"SkyPilot: node {env['SKYPILOT_NODE_RANK']} of {count} (SKYPILOT_NODE_IPS' first is the head)")


class RayWorker:
    """A Ray Train worker's child: its world rank and size, and rank 0's address (commands/ray_job.py sets them)."""

    source = "ray"
    names = ("ACCELTRAIN_RAY_COORDINATOR", "ACCELTRAIN_RAY_WORLD_SIZE", "ACCELTRAIN_RAY_WORLD_RANK")

    def read(self, env: Mapping[str, str]) -> Found | None:
        coordinator, size, rank = (env.get(name) for name in self.names)
        if size is None and rank is None:
            return None
        return Found(size, rank, coordinator, f"Ray Train: worker {rank} of {size} (ACCELTRAIN_RAY_*, set by the "
                                              "Ray job `acceltrain launch --emit ray` wrote)")


# cluster._detect's order for these (between acceltrain's own variables and the TPU VM, Slurm, Open MPI):
# Pathways first (its head pod may run inside a JobSet too), then the explicit JAX_* triple and a Ray worker's
# (a Ray cluster on TPU VMs or on KubeRay pods: the job is Ray's, of one process a worker), then what
# Kubernetes and SkyPilot say of a pod or node.
BEFORE_TPU_VM = (Pathways(), Kubeflow(), RayWorker())
AFTER_TPU_VM = (IndexedJob(), SkyPilot())
