"""A SkyPilot task YAML: `sky launch` (or `sky jobs launch`, which recovers preemptions) runs `run` on every
host: on each of `num_nodes` GPU or CPU nodes (connect() reads SKYPILOT_* , environments.SkyPilot), or on every
host of a TPU slice, which SkyPilot counts as one node (connect() reads the TPU VM's own variables).

The checkpoint and compile-cache folders are on a bucket SkyPilot mounts at /shared on every host.
"""

from acceltrain.commands.emit import job as emit

SHARED_DEFAULT = "/shared"


def check_layout(layout: emit.Layout) -> None:
    return None  # SkyPilot runs every generation of the table (TPU VMs, GPU and CPU nodes)


def document(job: emit.Job) -> dict:
    layout = job.layout
    if layout.kind == "tpu":
        resources = {"accelerators": f"tpu-{layout.slice_name}"}
        nodes, extra = 1, "'acceltrain[tpu]'"
    elif layout.kind == "gpu":
        resources = {"accelerators": f"{emit.SKYPILOT_GPUS[layout.version]}:{layout.chips_per_host}"}
        nodes, extra = layout.hosts, "'acceltrain[gpu]'"
    else:
        resources = {"cpus": "4+"}
        nodes, extra = layout.hosts, "acceltrain"
    return {
        "name": job.name,
        "resources": resources,
        "num_nodes": nodes,
        "workdir": ".",
        "file_mounts": {SHARED_DEFAULT: {"name": f"{job.name}-acceltrain-shared", "mode": "MOUNT"}},
        "envs": {"JAX_COMPILATION_CACHE_DIR": job.compile_cache_dir},
        "setup": f"pip install {extra}\n",
        "run": job.command + "\n",
    }


def render(job: emit.Job) -> str:
    document_ = document(job)
    document_["setup"], document_["run"] = emit.Literal(document_["setup"]), emit.Literal(document_["run"])
    layout = job.layout
    head = (f"# acceltrain launch --emit skypilot --target {layout.target}: "
            + (f"a {layout.slice_name} slice, `run` on each of its {layout.hosts} host(s)" if layout.kind == "tpu"
               else f"{layout.hosts} node(s)")
            + ".\n# Submit: sky jobs launch THIS.yaml (recovers preemptions; `run` resumes from the newest checkpoint).\n"
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
