"""A SkyPilot task YAML: `sky launch` (or `sky jobs launch`, which recovers preemptions) runs `run` on every
host: on each of `num_nodes` GPU or CPU nodes (connect() reads SKYPILOT_* , environments.SkyPilot), or on every
host of a TPU slice, which SkyPilot counts as one node (connect() reads the TPU VM's own variables).

The checkpoint and compile-cache folders are on a bucket SkyPilot mounts at /shared on every host. SkyPilot
syncs this folder to every host (`workdir: .`) and runs `run` there: the script is named relative to it (one
outside it is refused), and `setup` installs acceltrain from what the user has, never a name from a package
registry: the wheel of --wheel (copied to each host by `file_mounts`), or the project in this folder
(`pip install .`: acceltrain's own checkout, or the user's project that depends on it). A managed job
(`sky jobs launch`) recovers preemptions by itself, and a `run` that exits 42 (checkpointed on a notice) through
`job_recovery.recover_on_exit_codes`, which SkyPilot does not count against max_restarts_on_errors (0 by default:
any other failure, 127 included, is final).
"""

import shlex
from pathlib import Path

from acceltrain.commands.emit import job as emit
from acceltrain.errors import UsageError

SHARED_DEFAULT = "/shared"
WHEELS = "/tmp/acceltrain-wheel"  # where file_mounts puts --wheel on each host
RESTART_CODES = (42,)  # preemption.EXIT_RESTART
EXTRAS = {"tpu": "tpu", "gpu": "gpu", "cpu": None}  # acceltrain's extras (pyproject.toml) by the hosts' kind


def check_hosts(hosts: emit.Hosts) -> None:
    # SkyPilot runs every generation of the table (TPU VMs, GPU and CPU nodes), `run` once a node (a host of a slice).
    if hosts.processes_per_host > 1:
        raise UsageError(f"Received --processes {hosts.processes_per_host} with --emit skypilot: SkyPilot runs `run` "
                         "once a node, so a node holds one process. Pass --nodes "
                         f"{hosts.count * hosts.processes_per_host} for that many processes, one a node, or --emit "
                         "jobset or sbatch, which start several a node.")


def installs(wheel: str | None, here: Path | None = None) -> tuple[str, dict]:
    """(what `setup` installs, the file_mounts that bring it): the wheel of --wheel, else this folder's project."""
    here = Path.cwd() if here is None else here
    if wheel is not None:
        path = Path(wheel).resolve()
        if not (path.is_file() and path.name.endswith(".whl") and path.name.startswith("acceltrain-")):
            raise UsageError(f"Received --wheel {wheel}, which is not an acceltrain wheel file. Pass the "
                             "acceltrain-*.whl to install on each host (build one: python -m build --wheel in "
                             "acceltrain's folder, or pip wheel --no-deps acceltrain's-folder -w dist).")
        return f"{WHEELS}/{path.name}", {f"{WHEELS}/{path.name}": str(path)}
    if not ((here / "pyproject.toml").is_file() or (here / "setup.py").is_file()):
        raise UsageError(f"Received --emit skypilot in {here}, which holds no Python project (pyproject.toml or "
                         "setup.py) for `setup` to install acceltrain from on each host, and no --wheel. Pass --wheel "
                         "PATH/acceltrain-VERSION-py3-none-any.whl, or emit from your project's folder (its "
                         "dependencies naming acceltrain).")
    return ".", {}


def document(job: emit.Job, here: Path | None = None) -> dict:
    hosts = job.hosts
    if hosts.kind == "tpu":
        resources = {"accelerators": f"tpu-{hosts.slice_name}"}
        nodes = 1
    elif hosts.kind == "gpu":
        resources = {"accelerators": f"{emit.SKYPILOT_GPUS[hosts.version]}:{hosts.chips_per_host}"}
        nodes = hosts.count
    else:
        resources = {"cpus": "4+"}
        nodes = hosts.count
    resources["job_recovery"] = {"recover_on_exit_codes": emit.Flow(RESTART_CODES)}
    source, mounts = installs(job.wheel, here)
    extra = EXTRAS[hosts.kind]
    # The project's own extras only where it is acceltrain (a user's project brings acceltrain as it declares it).
    if extra is not None and (source != "." or _project_name(here or Path.cwd()) == "acceltrain"):
        source = f"{source}[{extra}]"
    return {
        "name": job.name,
        "resources": resources,
        "num_nodes": nodes,
        "workdir": ".",
        "file_mounts": {SHARED_DEFAULT: {"name": f"{job.name}-acceltrain-shared", "mode": "MOUNT"}, **mounts},
        "envs": {"JAX_COMPILATION_CACHE_DIR": job.compile_cache_dir},
        "setup": f"pip install {shlex.quote(source)}\n",
        "run": job.script + "\n",
    }


def _project_name(here: Path) -> str | None:
    """The [project] name of this folder's pyproject.toml, where it has one."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads((here / "pyproject.toml").read_text()).get("project", {}).get("name")
    except (OSError, ValueError):
        return None


def render(job: emit.Job) -> str:
    document_ = document(job)
    document_["setup"], document_["run"] = emit.Literal(document_["setup"]), emit.Literal(document_["run"])
    hosts = job.hosts
    head = (f"# acceltrain launch --emit skypilot --target {hosts.target}: "
            + (f"a {hosts.slice_name} slice, `run` on each of its {hosts.count} host(s) x {hosts.chips_per_host} chips"
               if hosts.kind == "tpu" else f"{hosts.count} node(s) x {job.devices_per_process} "
               f"{'GPUs' if hosts.kind == 'gpu' else 'CPU device(s)'}, one process a node")
            + ".\n# Submit: sky jobs launch THIS.yaml (recovers preemptions, and exit 42: a checkpoint saved on a notice; "
            "`run` resumes from the newest checkpoint; any other failure is final).\n"
            f"# `setup` installs acceltrain from {'the wheel of --wheel' if job.wheel else 'this folder (workdir)'}.\n"
            f"# {SHARED_DEFAULT} is a bucket SkyPilot creates and mounts on every host; rename it to one of yours.\n")
    return head + emit.dump_yaml(document_)


def recognizes(text: str) -> bool:
    return "run:" in text and "#SBATCH" not in text and "kind: JobSet" not in text


def check(text: str) -> list[str]:
    """The task's structure as acceltrain needs it; SkyPilot's own parser too where it is installed."""
    task, problems = emit.load_yaml_mapping(text)
    if task is None:
        return problems
    run = task.get("run")
    if not isinstance(run, str) or "acceltrain run" not in run:
        problems.append("run: does not call `acceltrain run`")
    elif "--resume" not in run or "--checkpoint-dir" not in run:
        problems.append("run: `acceltrain run` without --checkpoint-dir DIR --resume: a recovered job would start over")
    nodes = task.get("num_nodes", 1)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        problems.append(f"num_nodes: {nodes!r}: expected a whole number of at least 1")
    accelerators = str((task.get("resources") or {}).get("accelerators", ""))
    if accelerators.startswith("tpu-") and nodes != 1:
        problems.append(f"num_nodes: {nodes} with a TPU ({accelerators}): SkyPilot counts a slice as one node; "
                        "pass a bigger slice instead")
    recovery = (task.get("resources") or {}).get("job_recovery")
    codes = recovery.get("recover_on_exit_codes") if isinstance(recovery, dict) else None
    if 42 not in (codes if isinstance(codes, list) else [codes]):
        problems.append("resources: no job_recovery.recover_on_exit_codes with 42: a managed job that checkpointed on "
                        "a notice would end FAILED instead of restarting")
    setup = str(task.get("setup") or "")
    if "pip install acceltrain" in setup or "pip install 'acceltrain[" in setup:
        problems.append("setup: installs acceltrain by name from a package registry, where no acceltrain of yours is "
                        "published: install this folder (pip install .) or your wheel")
    return problems + _skypilot_says(text)


def _skypilot_says(text: str) -> list[str]:
    """SkyPilot's own reading of the task (sky.Task.from_yaml_config), where SkyPilot is installed."""
    try:
        import sky
    except ImportError:
        return []
    import yaml

    try:
        sky.Task.from_yaml_config(yaml.safe_load(text))
    except Exception as error:  # noqa: BLE001  (SkyPilot raises ValueError and its own schema errors)
        return [f"SkyPilot: {error}"]
    return []
