"""A Ray job: a short Python driver that Ray runs (`ray job submit --working-dir . -- python JOB.py`, or `python
JOB.py` on the head node). It names the job's values and calls acceltrain.commands.ray_job.run_job, which starts one
Ray Train worker a process, each running `acceltrain run` as process `rank` of one JAX job (connect() reads
environments.RayWorker), and restarts the worker group on a failure through Ray Train's FailureConfig.

The checkpoint and compile-cache folders must be one folder every node sees (NFS, a mounted bucket): Ray does
not sync them. On a TPU slice, one worker a host, holding the host's chips (Ray's "TPU" resource); on GPU boxes one
a box with its GPUs; on CPU nodes, --processes workers a node.
"""

import ast
import pprint

from acceltrain.commands.emit import job as emit

SHARED_DEFAULT = "/mnt/shared"
DRIVER = "acceltrain.commands.ray_job"


def check_hosts(hosts: emit.Hosts) -> None:
    return None  # Ray schedules workers by resources: TPU hosts, GPU boxes and CPU nodes alike


def arguments(job: emit.Job) -> dict:
    """run_job's keyword arguments for `job`."""
    hosts = job.hosts
    values = {"workers": hosts.count * hosts.processes_per_host, "max_failures": job.max_restarts,
              "name": job.name}
    if hosts.kind == "tpu":
        values["resources_per_worker"] = {"TPU": hosts.chips_per_host}
    elif hosts.kind == "gpu":
        values["gpus_per_worker"] = hosts.chips_per_host
    values["env"] = {"JAX_COMPILATION_CACHE_DIR": job.compile_cache_dir}
    return values


def render(job: emit.Job) -> str:
    hosts = job.hosts
    workers = hosts.count * hosts.processes_per_host
    devices = (f"{hosts.chips_per_host} chips" if hosts.kind == "tpu" else f"{hosts.chips_per_host} GPUs"
               if hosts.kind == "gpu" else f"{_simulated(job.run)} CPU device(s)")
    where = (f"one on each host of a {hosts.slice_name} slice" if hosts.kind == "tpu" else
             "one a GPU box" if hosts.kind == "gpu" else
             f"{hosts.count} node(s) x {hosts.processes_per_host} process(es)")
    where = f"{workers} process(es) x {devices}, one Ray Train worker each ({where})"
    keywords = "".join(f"    {name}={pprint.pformat(value, width=100)},\n" for name, value in arguments(job).items())
    command = pprint.pformat(list(job.run), width=96, compact=True).replace("\n", "\n    ")
    return (f"# acceltrain launch --emit ray --target {hosts.target}: {where}; one JAX job.\n"
            "# Submit: ray job submit --working-dir . -- python THIS.py (or `python THIS.py` on the head node).\n"
            f"# Ray Train restarts the whole job on any failure, up to max_failures times; each restart resumes\n"
            f"# from the newest checkpoint. {SHARED_DEFAULT} must be one folder every node sees (NFS, a bucket).\n"
            f"from {DRIVER} import run_job\n\n"
            "raise SystemExit(run_job(\n"
            f"    {command},\n"
            f"{keywords}))\n")


def _simulated(run) -> int:
    """The CPU devices of each process: --simulate-devices in the run command, else 1."""
    run = list(run)
    return int(run[run.index("--simulate-devices") + 1]) if "--simulate-devices" in run else 1


def recognizes(text: str) -> bool:
    return DRIVER in text and "run_job(" in text


def check(text: str) -> list[str]:
    """The driver as acceltrain needs it: one run_job call, its command and numbers literal and sound."""
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        return [f"not Python: {error}"]
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and getattr(node.func, "id", getattr(node.func, "attr", None)) == "run_job"]
    if len(calls) != 1 or len(calls[0].args) != 1:
        return ["expected one run_job(COMMAND, workers=..., max_failures=...) call"]
    try:
        command = ast.literal_eval(calls[0].args[0])
        keywords = {keyword.arg: ast.literal_eval(keyword.value) for keyword in calls[0].keywords}
    except ValueError:
        return ["run_job's arguments are not plain values (a list of strings, numbers): acceltrain cannot read them"]
    problems = []
    if not isinstance(command, list) or command[:2] != ["acceltrain", "run"]:
        problems.append("run_job's command is not `acceltrain run ...`")
    elif "--resume" not in command or "--checkpoint-dir" not in command:
        problems.append("run_job's command has no --checkpoint-dir DIR --resume: a restarted job would start over")
    for name, lowest in (("workers", 1), ("max_failures", -1)):
        value = keywords.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            problems.append(f"{name}={value!r}: expected a whole number of at least {lowest}"
                            + (" (-1: restart for ever)" if lowest == -1 else ""))
    return problems
