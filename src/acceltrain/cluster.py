"""How many processes this job has, and where that was read from: one ordered decision.

    processes, reason = choose_processes("jax", flags, os.environ, on_cloud_tpu_vm())

The order (the first source that names a job wins): the flags; acceltrain's own variables (`launch`); a
jax.distributed already started in this process (Ray Train's JaxTrainer starts it on every worker); Pathways's
proxy backend (one process); Kubeflow's JAX_* variables; a Cloud TPU VM or GKE TPU pod; a Kubernetes Indexed
Job / JobSet pod; a SkyPilot node; a Slurm step; Open MPI. Each source is a reader (READERS, in that order: the
engines' in environments.py, acceltrain's own here), asked in turn; the first that answers names the job, and its
values are checked here as flags are (`_job`).

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

    source: str  # "single", or the source of the first reader that named the job (READERS: "flags", "env", "started",
    #              "pathways", "kubeflow", "ray", "tpu", "jobset", "skypilot", "slurm", "openmpi")
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
    host = environments.Host(env, flags, cloud_tpu_vm, tpu_metadata or {}, started)
    processes, reason = _detect(host)
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


class Given(environments.Reader):
    """The user's own: connect()'s Cluster fields, or a CLI verb's flags (`names`)."""

    source, as_given = "flags", True

    def __init__(self, names):
        self.names = names

    def read(self, host):
        coordinator, count, index = (host.flags.get(name) for name in ARGUMENT_NAMES)
        if coordinator is None and count is None and index is None:
            return None
        if str(count).strip() == "1" and coordinator is None and index in (None, 0, "0"):
            return environments.Found(count, index, coordinator,
                                      f"{self.names[1]} 1: one process, whatever the environment says")
        return environments.Found(count, index, coordinator, f"set by {', '.join(self.names[:2])} and {self.names[2]}")


class Launched(environments.Reader):
    """acceltrain's own variables: what `acceltrain launch` sets for each process it starts."""

    source, as_given = "env", True
    names = (ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID)

    def read(self, host):
        coordinator, count, index = (host.env.get(name) for name in self.names)
        if coordinator is None and count is None and index is None:
            return None
        return environments.Found(count, index, coordinator, f"set by {', '.join(self.names[:2])} and {self.names[2]}")


class Started(environments.Reader):
    """jax.distributed already started here: Ray Train's JaxTrainer calls jax.distributed.initialize on each
    worker before the training function runs; the job it started stands."""

    source, jax_finds_coordinator = "started", True
    names = ("", "the started job's process count", "its process index")

    def read(self, host):
        if host.started is None:
            return None
        count, index = host.started
        if count == 1:
            return environments.Found(1, 0, None, "jax.distributed already started with one process")
        return environments.Found(count, index, None, "jax.distributed already started (as Ray Train's JaxTrainer "
                                                      f"does): process {index} of {count}")


# The order of the module's docstring: the first reader that names a job wins, after the user's own values (Given).
# Pathways first among the engines (its head pod may run inside a JobSet too), then the explicit JAX_* triple and a
# Ray worker's (a Ray cluster on TPU VMs or on KubeRay pods: the job is Ray's, of one process a worker), then the
# TPU VM, what Kubernetes and SkyPilot say of a pod or node, a Slurm step, Open MPI.
READERS = (Launched(), Started(), environments.Pathways(), environments.Kubeflow(), environments.RayWorker(),
           environments.CloudTpuVm(), environments.IndexedJob(), environments.SkyPilot(), environments.Slurm(),
           environments.OpenMPI())


def _detect(host: environments.Host) -> tuple[Processes, str]:
    for reader in (Given(FLAG_NAMES if under_cli() else ARGUMENT_NAMES), *READERS):
        if (found := reader.read(host)) is not None:
            return _job(reader, found), found.reason
    return SINGLE, "no cluster environment found"


def _job(reader: environments.Reader, found: environments.Found) -> Processes:
    """A reader's answer as Processes, its values checked as flags are."""
    if reader.source == "pathways":
        return Processes("pathways")
    if reader.as_given:  # the three checked together, as given
        return _explicit(found.coordinator, found.num_processes, found.process_id, reader.source, reader.names)
    if str(found.num_processes).strip() == "1":
        return SINGLE  # a job of one: whatever else its variables say
    if reader.jax_finds_coordinator:
        count = None if found.num_processes is None else _whole(reader.names[1], found.num_processes, minimum=1)
        index = None if found.process_id is None else _whole(reader.names[2], found.process_id, minimum=0)
        if count is not None and index is not None and index >= count:
            raise UsageError(f"Received {reader.names[2]}={index} with {reader.names[1]}={count}. "
                             f"Valid: 0 to {count - 1}.")
        return Processes(reader.source, count, index)
    job = _explicit(found.coordinator, found.num_processes, found.process_id, reader.source, reader.names)
    return SINGLE if job is None else job


# How a wrong job as given is named back: connect()'s Cluster fields, or the CLI's flags (errors.under_cli).
ARGUMENT_NAMES = ("coordinator", "num_processes", "process_id")
FLAG_NAMES = ("--coordinator", "--num-processes", "--process-id")
_EXAMPLES = {ARGUMENT_NAMES: "acceltrain.Cluster(coordinator='10.0.0.1:1234', num_processes=2, process_id=0) on the "
                             "first host (process_id=1 on the second)",
             FLAG_NAMES: "--coordinator 10.0.0.1:1234 --num-processes 2 --process-id 0 on the first host (and "
                         "--process-id 1 on the second)"}


def _explicit(coordinator, num_processes, process_id, source: str, names) -> Processes | None:
    """The three values given together, checked, named back as `names`; None when none is given."""
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
