"""How many processes this job has, and where that was read from: one ordered decision.

    processes, reason = choose_processes("jax", flags, os.environ, on_cloud_tpu_vm())

The order (the first source that names a job wins): the flags; acceltrain's own variables (`launch`); a
jax.distributed already started in this process (Ray Train's JaxTrainer starts it on every worker); Pathways's
proxy backend (one process); Kubeflow's JAX_* variables; a Cloud TPU VM or GKE TPU pod; a Kubernetes Indexed
Job / JobSet pod; a SkyPilot node; a Slurm step; Open MPI. Each engine's variables are read by its class in
environments.py (the TPU VM, Slurm and Open MPI here).

Plain data in, plain data out, so a table test covers every environment with none of them here. The
backend then starts jax.distributed from the result (`backends/jax/processes.py::start_processes`).
"""

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass

from acceltrain import environments
from acceltrain.errors import UsageError, under_cli
from acceltrain.hardware import tpu

# What `acceltrain launch` sets in each process it starts, and what a user may set by hand.
ENV_COORDINATOR = "ACCELTRAIN_COORDINATOR"
ENV_NUM_PROCESSES = "ACCELTRAIN_NUM_PROCESSES"
ENV_PROCESS_ID = "ACCELTRAIN_PROCESS_ID"
ENV_LAUNCHER_PID = "ACCELTRAIN_LAUNCHER_PID"  # tells a launched process whose death it must not outlive


def launcher_pid() -> int | None:
    """The pid of the `acceltrain launch` that started this process, if one did."""
    pid = os.environ.get(ENV_LAUNCHER_PID, "")
    return int(pid) if pid.isdigit() else None


@dataclass(frozen=True)
class Processes:
    """One process of a job of `num_processes`. None fields: JAX reads them from the environment itself."""

    source: str  # "single" | "flags" | "env" | "started" | "pathways" | "kubeflow" | "tpu" | "jobset" | "skypilot"
    #              | "slurm" | "openmpi"
    num_processes: int | None = 1
    process_id: int | None = 0
    coordinator: str | None = None  # "host:port" of process 0

    @property
    def distributed(self) -> bool:
        """Whether jax.distributed must start: more than one process, or a count only JAX can read."""
        return self.source not in ("single", "pathways")


SINGLE = Processes("single")


@dataclass(frozen=True)
class Cluster:
    """Where the rest of the job is, for `connect(cluster=...)` where the environment does not say it: the
    coordinator of a multi-process JAX job and this process's place in it, or a TPU reached by name.

    Args:
        coordinator: "host:port" of process 0. Default (this and the next two): read from the environment
            (acceltrain launch, Cloud TPU, SLURM, Open MPI), else one process.
        num_processes: the processes in the job (one per host).
        process_id: this process's index, 0 to num_processes - 1.
        tpu: the name or address of a TPU to connect to (TensorFlow backend); implies platform="tpu".
    """

    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    tpu: str | None = None


def choose_processes(backend: str, flags: Mapping[str, object], env: Mapping[str, str],
                     cloud_tpu_vm: bool, tpu_metadata: Mapping[str, str] | None = None,
                     started: tuple[int, int] | None = None) -> tuple[Processes, str]:
    """The first source that names a job wins, in the order of the module's docstring.

    Args:
        backend: "jax" or "tensorflow": multi-process training runs on JAX only.
        flags: coordinator, num_processes, process_id as given to connect() or `acceltrain run` (None: not given).
        env: the process environment.
        cloud_tpu_vm: whether this host has TPU chips and libtpu (`on_cloud_tpu_vm()`).
        tpu_metadata: what the Cloud TPU metadata server said of this VM where the environment says
            nothing (`accelerator-type`), as `tpu_metadata()` reads it; empty elsewhere.
        started: (process count, this process's index) of a jax.distributed job already started in this
            process, e.g. by Ray Train's JaxTrainer; None where none is.
    Errors and reasons name `flags` as the CLI's flags while a CLI verb runs (errors.under_cli), else as
    connect()'s Cluster fields.
    """
    processes, reason = _detect(flags, env, cloud_tpu_vm, tpu_metadata, started)
    if processes.distributed and backend != "jax" and processes.source == "tpu":
        raise UsageError(
            f"Received backend={backend!r} on a multi-host TPU slice ({reason}). TensorFlow's TPUStrategy "
            "reaches only this host's chips from a TPU VM, and Keras 3's fit fails under its multi-worker "
            "strategy (keras-team/keras#20585), so acceltrain trains TPU slices over several hosts on JAX only. "
            "Use --backend jax (connect(backend='jax')) and run the same command on every worker."
        )
    if processes.distributed and backend != "jax":
        raise UsageError(
            f"Received backend={backend!r} for a multi-process job ({reason}). Keras 3's fit fails under "
            "TensorFlow's MultiWorkerMirroredStrategy (keras-team/keras#20585), so acceltrain runs "
            "multi-process and multi-host jobs on JAX only. Use --backend jax (connect(backend='jax')); "
            "the same script runs unchanged."
        )
    return processes, reason


def _detect(flags, env, cloud_tpu_vm, tpu_metadata=None, started=None) -> tuple[Processes, str]:
    # 1. Explicit flags (or connect() arguments): the user said so.
    names = FLAG_NAMES if under_cli() else ARGUMENT_NAMES
    given = _explicit(flags.get("coordinator"), flags.get("num_processes"), flags.get("process_id"), "flags", names)
    if given == SINGLE:
        return given, f"{names[1]} 1: one process, whatever the environment says"
    if given is not None:
        return given, f"set by {names[0]}, {names[1]} and {names[2]}"
    # 2. acceltrain's own variables: what `acceltrain launch` sets for each process it starts.
    given = _explicit(env.get(ENV_COORDINATOR), env.get(ENV_NUM_PROCESSES), env.get(ENV_PROCESS_ID), "env")
    if given is not None:
        return given, f"set by {ENV_COORDINATOR}, {ENV_NUM_PROCESSES} and {ENV_PROCESS_ID}"
    # 3. jax.distributed already started here: Ray Train's JaxTrainer calls jax.distributed.initialize on each
    #    worker before the training function runs; the job it started stands.
    if started is not None:
        count, index = started
        if count == 1:
            return SINGLE, "jax.distributed already started with one process"
        return (Processes("started", count, index),
                f"jax.distributed already started (as Ray Train's JaxTrainer does): process {index} of {count}")
    # 4. Engines that say so explicitly: Pathways's proxy backend, Kubeflow's JAX_* variables.
    for engine in environments.BEFORE_TPU_VM:
        if (found := engine.read(env)) is not None:
            return _engine_job(engine, found)
    # 5. A Cloud TPU VM (or a GKE TPU pod): one host is one process on either backend; a slice over several
    #    hosts is a JAX job.
    if cloud_tpu_vm:
        return _tpu_vm(env, tpu_metadata or {})
    # 6. A Kubernetes Indexed Job / JobSet pod, a SkyPilot node.
    for engine in environments.AFTER_TPU_VM:
        if (found := engine.read(env)) is not None:
            return _engine_job(engine, found)
    # 7. A SLURM job step (srun): JAX's own SLURM support finds the coordinator.
    if "SLURM_JOB_ID" in env and "SLURM_NTASKS" in env and "SLURM_PROCID" in env:
        count = _int_env(env, "SLURM_NTASKS")
        if count == 1:
            return SINGLE, "a SLURM job with one task"
        if "SLURM_STEP_NODELIST" not in env:
            # The batch script or salloc shell itself, not a task of a step: one process, which may be meant.
            return SINGLE, (f"a SLURM allocation of {count} tasks, but not started by srun: one process "
                            "(for one per task: srun acceltrain run SCRIPT.py)")
        return Processes("slurm", count, _int_env(env, "SLURM_PROCID")), f"SLURM: {count} tasks"
    # 8. Open MPI's mpirun.
    if "OMPI_COMM_WORLD_SIZE" in env:
        count = _int_env(env, "OMPI_COMM_WORLD_SIZE")
        if count == 1:
            return SINGLE, "Open MPI with one process"
        if "OMPI_MCA_orte_hnp_uri" not in env:
            # JAX finds the coordinator through ORTE, which Open MPI 5 (PRRTE) no longer has.
            raise UsageError(
                f"Found Open MPI with {count} processes but no OMPI_MCA_orte_hnp_uri (Open MPI 5 and later "
                "lack it). Pass the job explicitly: acceltrain run --coordinator HOST0:PORT "
                "--num-processes N --process-id $OMPI_COMM_WORLD_RANK SCRIPT.py"
            )
        return Processes("openmpi", count, _int_env(env, "OMPI_COMM_WORLD_RANK")), f"Open MPI: {count} processes"
    return SINGLE, "no cluster environment found"


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


def _tpu_vm(env: Mapping[str, str], metadata: Mapping[str, str]) -> tuple[Processes, str]:
    """One process on a single-host TPU VM; a jax.distributed job over a multi-host slice.

    The slice's hosts: TPU_WORKER_HOSTNAMES where set (GKE, Ray), else the accelerator type from
    TPU_ACCELERATOR_TYPE or the metadata server. JAX itself reads the hosts' addresses when it starts.
    """
    worker = _int_or_none(env.get("TPU_WORKER_ID"))
    hosts = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    if len(hosts) == 1:
        return SINGLE, "a single-host TPU VM (TPU_WORKER_HOSTNAMES names one host)"
    if hosts:
        return (Processes("tpu", len(hosts), worker),
                f"a TPU slice of {len(hosts)} hosts (TPU_WORKER_HOSTNAMES), this is worker {worker}")
    accelerator, origin = env.get("TPU_ACCELERATOR_TYPE"), "TPU_ACCELERATOR_TYPE"
    if not accelerator and metadata.get("accelerator-type"):
        accelerator, origin = metadata["accelerator-type"], "the TPU metadata server"
    spans = slice_hosts(accelerator)
    if spans == "one":
        return SINGLE, f"a single-host TPU VM ({accelerator}, from {origin})"
    if spans == "several":
        return (Processes("tpu", None, worker),
                f"a multi-host TPU slice ({accelerator}, from {origin}; over {LARGEST_SINGLE_HOST_SLICE} "
                "per host): JAX reads its hosts from the TPU environment")
    # Neither the environment nor the metadata server says how big the slice is (Colab and Kaggle set
    # little; the metadata server is off with TPU_SKIP_MDS_QUERY): one process, the common case.
    return SINGLE, ("a TPU VM whose slice size nothing names (no TPU_WORKER_HOSTNAMES, TPU_ACCELERATOR_TYPE or "
                    "metadata): one process; on a multi-host slice pass --num-processes, --process-id and "
                    "--coordinator")


def _engine_job(engine, found: environments.Found) -> tuple[Processes, str]:
    """An engine's answer as Processes, its values checked as flags are."""
    if engine.source == "pathways":
        return Processes("pathways"), found.reason
    if str(found.num_processes).strip() == "1":
        return SINGLE, found.reason  # a job of one: whatever else its variables say
    job = _explicit(found.coordinator, found.num_processes, found.process_id, engine.source, engine.names)
    return (SINGLE if job is None else job), found.reason


# How a wrong job as given is named back: connect()'s Cluster fields, or the CLI's flags (errors.under_cli).
ARGUMENT_NAMES = ("coordinator", "num_processes", "process_id")
FLAG_NAMES = ("--coordinator", "--num-processes", "--process-id")
_EXAMPLES = {ARGUMENT_NAMES: "acceltrain.Cluster(coordinator='10.0.0.1:1234', num_processes=2, process_id=0) on the "
                             "first host (process_id=1 on the second)",
             FLAG_NAMES: "--coordinator 10.0.0.1:1234 --num-processes 2 --process-id 0 on the first host (and "
                         "--process-id 1 on the second)"}


def _explicit(coordinator, num_processes, process_id, source: str, names=None) -> Processes | None:
    """The three values given together, checked; None when none is given."""
    names = names or (ARGUMENT_NAMES if source == "flags" else (ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID))
    values = (coordinator, num_processes, process_id)
    if all(value is None for value in values):
        return None
    count = _whole(names[1], num_processes, minimum=1) if num_processes is not None else None
    if count == 1 and coordinator is None and process_id in (None, 0, "0"):
        return SINGLE  # "--num-processes 1": one process, skip the environment's
    missing = [name for name, value in zip(names, values) if value is None]
    if missing:
        raise UsageError(
            f"Received {', '.join(f'{n}={v}' for n, v in zip(names, values) if v is not None)} without "
            f"{' and '.join(missing)}. A multi-process job needs all three, e.g. "
            f"{_EXAMPLES.get(names, _EXAMPLES[FLAG_NAMES])}."
        )
    index = _whole(names[2], process_id, minimum=0)
    if index >= count:
        raise UsageError(f"Received {names[2]}={index} with {names[1]}={count}. Valid: 0 to {count - 1}.")
    host, _, port = str(coordinator).rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"Received {names[0]}={coordinator!r}. Expected HOST:PORT of process 0, e.g. 10.0.0.1:1234.")
    return Processes(source, count, index, str(coordinator))


def _whole(name: str, value, *, minimum: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = None
    if number is None or isinstance(value, bool) or str(number) != str(value).strip() or number < minimum:
        raise UsageError(f"Received {name}={value!r}. Expected a whole number of at least {minimum}.")
    return number


def _int_env(env, name: str) -> int:
    return _whole(name, env[name], minimum=0)


def _int_or_none(value) -> int | None:
    return int(value) if value is not None and str(value).isdigit() else None


# The GCE metadata server, which a Cloud TPU VM answers about itself (JAX reads its TPU settings there).
METADATA_URL = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/"
METADATA_TIMEOUT_S = 2.0


def on_cloud_tpu_vm(device_files=None) -> bool:
    """TPU chips on this host and libtpu to drive them: what JAX itself checks before reading TPU metadata."""
    return bool(tpu.device_files(device_files)) and importlib.util.find_spec("libtpu") is not None


def tpu_metadata(env: Mapping[str, str]) -> dict[str, str]:
    """This TPU VM's accelerator type from the metadata server, when the environment does not name the
    slice and TPU_SKIP_MDS_QUERY is unset (as JAX decides). Empty when it does not answer in time."""
    if env.get("TPU_WORKER_HOSTNAMES") or env.get("TPU_ACCELERATOR_TYPE") or env.get("TPU_SKIP_MDS_QUERY") is not None:
        return {}
    import urllib.request

    request = urllib.request.Request(METADATA_URL + "accelerator-type", headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=METADATA_TIMEOUT_S) as answer:
            return {"accelerator-type": answer.read().decode().strip()}
    except (OSError, ValueError):
        return {}


def detect(backend: str, coordinator=None, num_processes=None, process_id=None,
           started: tuple[int, int] | None = None) -> tuple[Processes, str]:
    """choose_processes() on this host's environment (`started`: see choose_processes)."""
    flags = {"coordinator": coordinator, "num_processes": num_processes, "process_id": process_id}
    tpu_vm = on_cloud_tpu_vm()
    metadata = tpu_metadata(os.environ) if tpu_vm else {}
    return choose_processes(backend, flags, os.environ, tpu_vm, metadata, started)
