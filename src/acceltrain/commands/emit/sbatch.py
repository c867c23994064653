"""An sbatch script: Slurm runs `acceltrain run` as one task a host (a GPU box) or N tasks of a CPU node, with
`srun`; connect() reads the job from SLURM_* (cluster.py), JAX its coordinator from the step's nodes.

`--signal=TERM@120` has Slurm send SIGTERM to every task two minutes before the time limit, as a preemption or
`scontrol requeue` does: each process checkpoints and exits 42. `--requeue` lets Slurm put a preempted job back in
the queue; the script requeues itself when the step ends with 42 only (Slurm counts no restarts: a job requeued
on every crash would crash for ever), and the requeued job resumes from the newest checkpoint (`--resume`), with
JAX's compiled programs from the shared cache. Any other failure ends the job, 127 (no `acceltrain` on the node:
said in one line before srun) included.
"""

import re

from acceltrain.commands.emit import job as emit
from acceltrain.errors import UsageError

SHARED_DEFAULT = "${SLURM_SUBMIT_DIR}/acceltrain"  # the folder sbatch ran in: shared by the nodes on most clusters
NOTICE_SECONDS = 120
RESTART_CODE = 42  # preemption.EXIT_RESTART: every process saved its checkpoint of one agreed step


def check_hosts(hosts: emit.Hosts) -> None:
    if hosts.kind == "tpu":
        raise UsageError(f"Received --target {hosts.target} with --emit sbatch: Slurm runs GPU and CPU clusters "
                         "here. For a TPU slice pass --emit jobset (GKE) or --emit skypilot.")


def render(job: emit.Job) -> str:
    hosts = job.hosts
    lines = [
        "#!/bin/bash",
        f"# acceltrain launch --emit sbatch --target {hosts.target}: {hosts.count} node(s) x "
        + (f"{hosts.chips_per_host} GPUs, one process a node." if hosts.kind == "gpu"
           else f"{hosts.processes_per_host} process(es) a node: {hosts.processes} process(es) x "
                f"{job.devices_per_process} CPU device(s)."),
        "# SIGTERM (the time limit's notice, a preemption, scontrol requeue): each process checkpoints and stops;",
        "# exit 42 requeues the job, which resumes from the newest checkpoint; any other failure ends it.",
        "# Submit: sbatch THIS.sh",
        f"#SBATCH --job-name={job.name}",
        f"#SBATCH --nodes={hosts.count}",
        f"#SBATCH --ntasks-per-node={hosts.processes_per_host}",
    ]
    if hosts.kind == "gpu":
        lines.append(f"#SBATCH --gpus-per-node={hosts.chips_per_host}")
    lines += [
        f"#SBATCH --signal=TERM@{NOTICE_SECONDS}",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={job.name}-%j.out",
        "",
        f'export JAX_COMPILATION_CACHE_DIR="{job.compile_cache_dir}"',
        *([ "# JAX's Slurm detection gives a task only the GPU of its SLURM_LOCALID (one task a GPU); one task a node",
            f"export JAX_LOCAL_DEVICE_IDS={','.join(map(str, range(hosts.chips_per_host)))}  # drives all {hosts.chips_per_host}"]
          if hosts.kind == "gpu" else []),
        f'mkdir -p "{job.checkpoint_dir}" "$JAX_COMPILATION_CACHE_DIR"',
        emit.ACCELTRAIN_THERE,
        f"srun --kill-on-bad-exit=1 {job.command}",
        "code=$?",
        f'if [ "$code" -eq {RESTART_CODE} ]; then',
        "    # Slurm ends this script as it requeues the job: one that exits first ends as failed, not requeued",
        '    scontrol requeue "$SLURM_JOB_ID" && sleep 300',
        "fi",
        'exit "$code"',
        "",
    ]
    return "\n".join(lines)


def recognizes(text: str) -> bool:
    return "#SBATCH" in text


def check(text: str) -> list[str]:
    """What an edited sbatch script lacks for acceltrain's job: srun of `acceltrain run`, the notice, the requeue."""
    options = dict(re.findall(r"^#SBATCH\s+--([a-z-]+)(?:[=\s]+(\S+))?", text, flags=re.M))
    problems = []
    if not re.search(r"^\s*srun\b.*\bacceltrain run\b", text, flags=re.M):
        problems.append("no `srun ... acceltrain run` line: without srun the script runs one process, not one a task")
    elif not re.search(r"\bacceltrain run\b.*--checkpoint-dir\s+\S+.*--resume", text):
        problems.append("`acceltrain run` without --checkpoint-dir DIR --resume: a requeued job would start over")
    if "requeue" not in options:
        problems.append("no #SBATCH --requeue: Slurm would not put a preempted job back in the queue")
    if "signal" not in options:
        problems.append("no #SBATCH --signal: the time limit would kill the job without a checkpoint "
                        f"(e.g. --signal=TERM@{NOTICE_SECONDS})")
    elif options["signal"].startswith("B:"):
        problems.append(f"#SBATCH --signal={options['signal']} signals the batch shell only, not acceltrain's "
                        f"processes: use --signal=TERM@{NOTICE_SECONDS}")
    if "gpus-per-node" in options and options.get("ntasks-per-node", "1") == "1" and "JAX_LOCAL_DEVICE_IDS" not in text:
        problems.append("one task a node with --gpus-per-node and no JAX_LOCAL_DEVICE_IDS: JAX's Slurm detection "
                        "would give each process only its SLURM_LOCALID's GPU (export JAX_LOCAL_DEVICE_IDS=0,1,...)")
    for name in ("nodes", "ntasks-per-node", "gpus-per-node"):
        value = options.get(name)
        if value is not None and not value.isdigit():
            problems.append(f"#SBATCH --{name}={value}: expected a whole number")
    return problems
