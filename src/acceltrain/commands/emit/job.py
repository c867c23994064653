"""The plain values an artifact is rendered from: where the job runs (Hosts, from the plan's hardware table)
and what it runs (Job). Each engine module renders a Job; none imports another."""

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from acceltrain.errors import UsageError, positive_int
from acceltrain.planning import targets

# xpk's restart convention (AI-Hypercomputer/xpk src/xpk/commands/workload.py::get_restart_exit_codes, commit
# 367c838) is 42, the code of a process that checkpointed on a notice and wants to be restarted, and 127-255.
# 127 is left out here: it is the shell's "command not found" (an image or node without acceltrain), which no
# restart mends; 128 + N, a process killed by signal N (a node lost, an OOM kill), is restarted.
RESTART_EXIT_CODES = (42, *range(128, 256))
EXIT_NOT_FOUND = 127
IMAGE_PLACEHOLDER = "REPLACE-WITH-YOUR-IMAGE"  # an image with acceltrain and the script in its working folder
DEFAULT_MAX_RESTARTS = 10

# GKE's TPU node labels per generation: xpk's table (src/xpk/core/system_characteristics.py, commit 367c838),
# which lists v4, v5e, v5p, v6e and tpu7x and neither v2 nor v3: those run on Cloud TPU VMs only.
GKE_TPU_ACCELERATORS = {"v4": "tpu-v4-podslice", "v5e": "tpu-v5-lite-podslice", "v5p": "tpu-v5p-slice",
                        "v6e": "tpu-v6e-slice"}
# SkyPilot's accelerator names for the GPU boxes of the plan's table (its `sky show-gpus` names).
SKYPILOT_GPUS = {"h100": "H100", "a100": "A100-80GB", "h200": "H200"}
# GKE's GPU node label values (xpk's table above: nvidia-h100-80gb, nvidia-h200-141gb; the A100 80 GB's).
GKE_GPUS = {"h100": "nvidia-h100-80gb", "a100": "nvidia-a100-80gb", "h200": "nvidia-h200-141gb"}


@dataclass(frozen=True)
class Hosts:
    """Where the job runs: `count` hosts (TPU VMs, GPU boxes or CPU nodes), `processes_per_host` processes on each,
    their accelerators. Not a model's layout (layout/): the machines an artifact asks an engine for."""

    target: str
    kind: str  # "tpu" | "gpu" | "cpu"
    count: int
    chips_per_host: int  # TPU chips or GPUs per host; 0 on CPU
    processes_per_host: int = 1
    version: str = ""  # the TPU generation (v5e) or GPU model (h100)
    topology: str = ""  # the TPU slice's topology as GKE names it (4x4, 2x2x2)
    slice_name: str = ""  # the Cloud TPU accelerator type (v5litepod-16)

    @property
    def processes(self) -> int:
        """The job's processes: one a host, or --processes a CPU node."""
        return self.count * self.processes_per_host


@dataclass(frozen=True)
class Job:
    """One artifact's content: plain values an engine module renders."""

    name: str
    hosts: Hosts
    run: tuple[str, ...]  # `acceltrain run ...` with its flags, the script and its arguments
    checkpoint_dir: str
    compile_cache_dir: str
    image: str
    max_restarts: int
    grace_seconds: int | None = None  # the JobSet's terminationGracePeriodSeconds (None: Kubernetes's 30 s)
    grace_reason: str = ""  # how it was set (jobset.grace)
    queue: str | None = None  # Kueue's LocalQueue (kueue.x-k8s.io/queue-name)
    priority_class: str | None = None  # a Kubernetes PriorityClass
    exclusive_topology: str | None = None  # a node label: one replicated Job per domain of it
    wheel: str | None = None  # SkyPilot: the acceltrain wheel to install on every node (None: the workdir's project)

    @property
    def command(self) -> str:
        # A part naming a variable (${SLURM_SUBMIT_DIR}/...) is quoted so that the shell expands it.
        return " ".join(f'"{part}"' if "$" in part else shlex.quote(part) for part in self.run)

    @property
    def script(self) -> str:
        """The command, after a check that `acceltrain` is there: without it the job fails once, with a line that
        says so (exit 127, which no engine restarts), instead of being restarted into the same failure."""
        return f"{ACCELTRAIN_THERE}\n{self.command}"

    @property
    def devices_per_process(self) -> int:
        """The accelerators one process drives: a host's chips or GPUs; on CPU, JAX's one CPU device a process, or
        --simulate-devices N of them."""
        if self.hosts.kind != "cpu":
            return self.hosts.chips_per_host
        flags = list(self.run)
        return int(flags[flags.index("--simulate-devices") + 1]) if "--simulate-devices" in flags else 1


# The first line of every artifact's command: bash's own "acceltrain: command not found" says neither where nor why.
ACCELTRAIN_THERE = ('command -v acceltrain > /dev/null || { echo "acceltrain: error: no acceltrain command on $(hostname)'
                    ': install acceltrain in the image or node (exit 127: the job fails, not restarted)" >&2; '
                    f'exit {EXIT_NOT_FOUND}; }}')


def hosts(target: str, nodes: int | None = None, processes: int | None = None) -> Hosts:
    """The hosts and accelerators of --target (the plan's hardware table), `nodes` boxes of a GPU or CPU target."""
    if str(target).strip().lower() == "cpu":
        return Hosts("cpu", "cpu", positive_int(1 if nodes is None else nodes, "--nodes"), 0,
                     positive_int(1 if processes is None else processes, "--processes"))
    found = targets.resolve(target)
    if found.kind == "here":
        raise UsageError("Received --target here with --emit: an artifact runs elsewhere. Pass the hardware it "
                         "runs on, e.g. tpu-v5e-16, h100-8, or cpu.")
    if processes not in (None, 1):
        raise UsageError(f"Received --processes {processes} with --target {target}: acceltrain runs one process a "
                         "host, which drives all its chips. Leave --processes out (it is for --target cpu).")
    if found.kind == "gpu":
        model = next(name for name, family in targets.GPU_FAMILIES.items() if family.device_kind == found.device_kind)
        return Hosts(found.name, "gpu", positive_int(1 if nodes is None else nodes, "--nodes"), found.devices,
                     version=model)
    if nodes not in (None, 1):
        raise UsageError(f"Received --nodes {nodes} with --target {target}: a TPU slice's hosts follow from its "
                         "size. Pass a bigger slice instead (e.g. tpu-v5e-32).")
    version = next(v for v, family in targets.TPU_FAMILIES.items() if family.device_kind == found.device_kind)
    family = targets.TPU_FAMILIES[version]
    chips = found.devices // family.devices_per_chip
    # One host holds 4 chips (v2, v3, v4, v5p), or up to 8 on v5e and v6e, whose slices of more than 8 chips
    # have 4 a host (Cloud TPU's v5e and v6e pages; environments.LARGEST_SINGLE_HOST_SLICE).
    per_host = min(chips, 8 if version in ("v5e", "v6e") and chips <= 8 else 4)
    topology = found.topology.partition(":")[2] if chips > 1 else ("1x1" if family.topology_dims == 2 else "1x1x1")
    size = chips * 2 if family.cores_in_name else chips
    slice_name = f"{'v5litepod' if version == 'v5e' else version}-{size}"
    return Hosts(found.name, "tpu", chips // per_host, per_host, version=version, topology=topology,
                 slice_name=slice_name)


def script_in_folder(script: str, engine: str, where: str, image_paths: bool = False) -> str:
    """SCRIPT as the engine's host finds it: relative to this folder, which the engine syncs (SkyPilot's workdir)
    or the image holds as its working folder (`where` says which). One outside it is refused with the fix; with
    `image_paths`, an absolute path that is not on this machine is taken as the image's own."""
    here = Path.cwd().resolve()
    path = Path(script)
    if path.is_absolute() and image_paths and not path.exists():
        return script
    resolved = (here / path).resolve()
    if not resolved.is_relative_to(here):
        raise UsageError(f"Received SCRIPT {script}, outside this folder ({here}), {where}: the job would not find "
                         f"it there. Run `acceltrain launch --emit {engine}` from a folder that holds the script (cd "
                         f"{resolved.parent} && acceltrain launch --emit {engine} ... {resolved.name}), or copy it "
                         "into this one.")
    return resolved.relative_to(here).as_posix()


def job_name(name: str | None, script: str) -> str:
    """A DNS label for the job: --name, or the script's name made one."""
    text = name if name is not None else re.sub(r"[^a-z0-9-]+", "-", Path(script).stem.lower()).strip("-") or "train"
    # A JobSet's pods are named NAME-slice-0-I: 63 characters at most for each, as Kubernetes's DNS labels.
    if not re.fullmatch(r"[a-z]([a-z0-9-]{0,38}[a-z0-9])?", text):
        raise UsageError(f"Received --name {text!r}. Valid: lowercase letters, digits and '-', starting with a letter "
                         "and ending with a letter or digit, at most 40 characters (a Kubernetes name), e.g. "
                         "mnist-run-1.")
    return text




# --- YAML, as both YAML engines (JobSet, SkyPilot) write and read it -----------------------------------------

class Flow(list):
    """A list dumped on one line ([42, 127, 128, ...]), as xpk writes the exit codes."""


class Literal(str):
    """A string dumped as a block (|), whole on its own lines, however long: a command, a script."""


def dump_yaml(document: dict) -> str:
    """`document` as YAML in its own key order, Flow lists on one line and Literal strings as blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(Flow, lambda dumper, items: dumper.represent_sequence("tag:yaml.org,2002:seq", items,
                                                                                  flow_style=True))
    Dumper.add_representer(Literal, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text,
                                                                                 style="|"))
    return yaml.dump(document, Dumper=Dumper, sort_keys=False, width=120)


def load_yaml_mapping(text: str) -> tuple[dict | None, list[str]]:
    """(the mapping, []) where `text` is a YAML mapping; else (None, what is wrong with it)."""
    import yaml

    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        return None, [f"not YAML: {error}"]
    if not isinstance(document, dict):
        return None, ["not a YAML mapping"]
    return document, []
