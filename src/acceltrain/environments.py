"""Each engine's in-job contract: which variables it sets in a process, and what they say of the job.

A class per engine (a Reader, as Lightning Fabric's ClusterEnvironment is one per scheduler) reads a Host (the
environment, and what this host says beyond it) and answers one question: is this process one of that engine's
job, and if so, how many processes, which one, and where process 0 listens. Nothing else: no I/O, no framework.
`cluster._detect` asks them in the order of `cluster.READERS`, and checks what the first that answers found; the
tests feed them environments recorded from each engine's documentation (tests/engine_environments.py).

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
- A Cloud TPU VM (or a GKE TPU pod): TPU_WORKER_HOSTNAMES and TPU_WORKER_ID where set (GKE, Ray), else the
  accelerator type (TPU_ACCELERATOR_TYPE, or the metadata server: cluster.tpu_metadata); JAX reads the hosts'
  addresses itself (jax/_src/clusters/cloud_tpu_cluster.py).
- A Slurm job step (srun): SLURM_NTASKS and SLURM_PROCID; JAX's own Slurm support picks the coordinator
  (jax/_src/clusters/slurm_cluster.py). Open MPI's mpirun: OMPI_COMM_WORLD_SIZE and OMPI_COMM_WORLD_RANK; JAX
  finds the coordinator through ORTE's OMPI_MCA_orte_hnp_uri (jax/_src/clusters/ompi_cluster.py).
- A Ray job `acceltrain launch --emit ray` wrote (commands/ray_job.py): each Ray Train worker starts `acceltrain
  run` as a child process and passes it Ray Train's own context (ray.train.get_context(): get_world_rank(),
  get_world_size()) and rank 0's address, broadcast by Ray (ray.train.collective.broadcast_from_rank_zero), as
  the three ACCELTRAIN_RAY_* variables: Ray sets no variable of its own that names a worker's rank.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

from acceltrain.errors import UsageError

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


@dataclass(frozen=True)
class Host:
    """What the readers read: this process's environment, and what this host says beyond it."""

    env: Mapping[str, str]
    flags: Mapping[str, object] = field(default_factory=dict)  # coordinator, num_processes, process_id given
    cloud_tpu_vm: bool = False  # TPU chips here and libtpu to drive them (cluster.on_cloud_tpu_vm)
    tpu_metadata: Mapping[str, str] = field(default_factory=dict)  # the metadata server's answer (cluster.tpu_metadata)
    started: tuple[int, int] | None = None  # (count, index) of a jax.distributed job already started in this process


class Reader:
    """One source of a job. `read(host)`: None where this process is not one of its job, else what the job is
    (Found), its values as read; cluster checks them, naming each as `names` does (coordinator, count, index)."""

    source = ""  # cluster.Processes.source of the job it names
    names = ("", "", "")
    as_given = False  # the user's own three values: checked together as given (a job of one with a coordinator too)
    jax_finds_coordinator = False  # it names no coordinator: JAX's own support for it finds process 0

    def read(self, host: Host) -> Found | None:
        raise NotImplementedError


def _port(env: Mapping[str, str]) -> str:
    return env.get("JAX_COORDINATOR_PORT") or str(COORDINATOR_PORT)


class Pathways(Reader):
    """Pathways's proxy backend: one Python process drives every chip of the job; no jax.distributed."""

    source = "pathways"
    names = ("JAX_BACKEND_TARGET", "", "")

    def read(self, host: Host) -> Found | None:
        env = host.env
        if "proxy" not in env.get("JAX_PLATFORMS", "").split(","):
            return None
        target = env.get("JAX_BACKEND_TARGET")
        where = f", JAX_BACKEND_TARGET={target}" if target else ""
        return Found(1, 0, None, f"Pathways's proxy backend (JAX_PLATFORMS=proxy{where}): one process drives "
                                 "every chip, so no jax.distributed")


class _ThreeVariables(Reader):
    """An engine that names the job in three variables of its own (`names`: coordinator, count, index)."""

    def read(self, host: Host) -> Found | None:
        coordinator, count, index = (host.env.get(name) for name in self.names)
        if count is None and index is None:
            return None  # a coordinator alone is no job (JAX_COORDINATOR_ADDRESS is also JAX's own setting)
        return Found(count, index, coordinator, self.says(count, index))

    def says(self, count, index) -> str:
        raise NotImplementedError


class Kubeflow(_ThreeVariables):
    """Kubeflow Trainer's JAX runtime: the three JAX_* variables, as JAX itself names them."""

    source = "kubeflow"
    names = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")

    def says(self, count, index) -> str:
        return "set by JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID (Kubeflow Trainer's JAX runtime)"


class IndexedJob(Reader):
    """A pod of a Kubernetes Indexed Job, and so of a JobSet: its completion index, its Job's pod hostnames."""

    source = "jobset"
    names = ("HOSTNAME and JOBSET_NAME", "JOB_COMPLETIONS", "JOB_COMPLETION_INDEX")

    def read(self, host: Host) -> Found | None:
        env = host.env
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


class SkyPilot(Reader):
    """A SkyPilot task's node: rank, the nodes' IPs (the head first), their count."""

    source = "skypilot"
    names = ("SKYPILOT_NODE_IPS", "SKYPILOT_NUM_NODES", "SKYPILOT_NODE_RANK")

    def read(self, host: Host) -> Found | None:
        env = host.env
        if "SKYPILOT_NODE_RANK" not in env or "SKYPILOT_NUM_NODES" not in env:
            return None
        ips = [line.strip() for line in env.get("SKYPILOT_NODE_IPS", "").splitlines() if line.strip()]
        head = f"{ips[0]}:{_port(env)}" if ips else None
        count = env["SKYPILOT_NUM_NODES"]
        return Found(count, env["SKYPILOT_NODE_RANK"], head,
                     f"SkyPilot: node {env['SKYPILOT_NODE_RANK']} of {count} (SKYPILOT_NODE_IPS' first is the head)")


class RayWorker(_ThreeVariables):
    """A Ray Train worker's child: its world rank and size, and rank 0's address (commands/ray_job.py sets them)."""

    source = "ray"
    names = ("ACCELTRAIN_RAY_COORDINATOR", "ACCELTRAIN_RAY_WORLD_SIZE", "ACCELTRAIN_RAY_WORLD_RANK")

    def says(self, count, index) -> str:
        return (f"Ray Train: worker {index} of {count} (ACCELTRAIN_RAY_*, set by the Ray job `acceltrain launch --emit "
                "ray` wrote)")


# The largest slice one TPU VM holds, in the unit its accelerator type counts: TensorCores for v2, v3,
# v4, v5p and tpu7x (8 = 4 chips of 2 cores), chips for v5e (v5litepod) and v6e (8 chips). Cloud TPU's
# "TPU versions" pages (cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e; read 2026-12-03): v4-8, v5p-8,
# v5litepod-8 and v6e-8 are one host; v4-16, v5litepod-16 and up span several.
LARGEST_SINGLE_HOST_SLICE = 8


def slice_hosts(accelerator_type: str | None) -> str | None:
    """"one" or "several" hosts for an accelerator type ("v5litepod-16", "v4-8", "v5e-1"); None if unreadable."""
    generation, _, size = (accelerator_type or "").strip().rpartition("-")
    if not size.isdigit() or not generation.startswith(("v", "tpu")):
        return None
    return "one" if int(size) <= LARGEST_SINGLE_HOST_SLICE else "several"


class CloudTpuVm(Reader):
    """A Cloud TPU VM (or a GKE TPU pod): one host is one process on either backend; a slice over several hosts
    is a JAX job, whose hosts JAX reads from the TPU environment."""

    source = "tpu"
    names = ("", "TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID")
    jax_finds_coordinator = True

    def read(self, host: Host) -> Found | None:
        if not host.cloud_tpu_vm:
            return None
        env, worker = host.env, host.env.get("TPU_WORKER_ID")
        worker = int(worker) if worker is not None and str(worker).isdigit() else None
        hosts = [name for name in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if name.strip()]
        if len(hosts) == 1:
            return Found(1, 0, None, "a single-host TPU VM (TPU_WORKER_HOSTNAMES names one host)")
        if hosts:
            return Found(len(hosts), worker, None,
                         f"a TPU slice of {len(hosts)} hosts (TPU_WORKER_HOSTNAMES), this is worker {worker}")
        accelerator, origin = env.get("TPU_ACCELERATOR_TYPE"), "TPU_ACCELERATOR_TYPE"
        if not accelerator and host.tpu_metadata.get("accelerator-type"):
            accelerator, origin = host.tpu_metadata["accelerator-type"], "the TPU metadata server"
        spans = slice_hosts(accelerator)
        if spans == "one":
            return Found(1, 0, None, f"a single-host TPU VM ({accelerator}, from {origin})")
        if spans == "several":
            return Found(None, worker, None,
                         f"a multi-host TPU slice ({accelerator}, from {origin}; over {LARGEST_SINGLE_HOST_SLICE} "
                         "per host): JAX reads its hosts from the TPU environment")
        # Neither the environment nor the metadata server says how big the slice is (Colab and Kaggle set
        # little; the metadata server is off with TPU_SKIP_MDS_QUERY): one process, the common case.
        return Found(1, 0, None, "a TPU VM whose slice size nothing names (no TPU_WORKER_HOSTNAMES, "
                                 "TPU_ACCELERATOR_TYPE or metadata): one process; on a multi-host slice pass "
                                 "--num-processes, --process-id and --coordinator")


class Slurm(Reader):
    """A task of a Slurm job step (srun); the batch script's or salloc's own shell is one process."""

    source = "slurm"
    names = ("", "SLURM_NTASKS", "SLURM_PROCID")
    jax_finds_coordinator = True

    def read(self, host: Host) -> Found | None:
        env = host.env
        if not all(name in env for name in ("SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_PROCID")):
            return None
        count = env["SLURM_NTASKS"]
        if count.strip() == "1":
            return Found(1, 0, None, "a SLURM job with one task")
        if "SLURM_STEP_NODELIST" not in env:
            # The batch script or salloc shell itself, not a task of a step: one process, which may be meant.
            return Found(1, 0, None, f"a SLURM allocation of {count} tasks, but not started by srun: one process "
                                     "(for one per task: srun acceltrain run SCRIPT.py)")
        return Found(count, env["SLURM_PROCID"], None, f"SLURM: {count} tasks")


class OpenMPI(Reader):
    """A process Open MPI's mpirun started (Open MPI 4: JAX finds the coordinator through ORTE)."""

    source = "openmpi"
    names = ("", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")
    jax_finds_coordinator = True

    def read(self, host: Host) -> Found | None:
        env = host.env
        if "OMPI_COMM_WORLD_SIZE" not in env:
            return None
        count = env["OMPI_COMM_WORLD_SIZE"]
        if count.strip() == "1":
            return Found(1, 0, None, "Open MPI with one process")
        if "OMPI_MCA_orte_hnp_uri" not in env:
            # JAX finds the coordinator through ORTE, which Open MPI 5 (PRRTE) no longer has.
            raise UsageError(
                f"Found Open MPI with {count} processes but no OMPI_MCA_orte_hnp_uri (Open MPI 5 and later "
                "lack it). Pass the job explicitly: acceltrain run --coordinator HOST0:PORT "
                "--num-processes N --process-id $OMPI_COMM_WORLD_RANK SCRIPT.py"
            )
        return Found(count, env.get("OMPI_COMM_WORLD_RANK"), None, f"Open MPI: {count} processes")
