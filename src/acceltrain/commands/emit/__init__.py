"""`acceltrain launch --emit ENGINE --target TARGET SCRIPT.py [ARGS]`: what an engine takes to run the script,
unchanged, as one JAX job with `acceltrain run` on every host. One module per engine renders it (jobset.py,
sbatch.py, skypilot.py, ray.py) from one plain `Job`; `check_artifact` reads one back (`acceltrain doctor
--artifact`).

Every artifact runs `acceltrain run --checkpoint-dir SHARED --resume SCRIPT ARGS` with JAX's persistent
compilation cache in a shared folder (JAX_COMPILATION_CACHE_DIR): a restarted or requeued job resumes from the
newest checkpoint and finds its programs compiled. An engine restarts the job on exit code 42 (a checkpoint saved
on a notice); the JobSet also on 128-255 (a process killed by a signal: a lost node), xpk's convention less 127,
the shell's "command not found", which each artifact says in one line before it fails. Any other failure is
final (a Ray job: Ray Train restarts on any failure, up to max_failures). The script is named as the engine's host
finds it: relative to this folder, which SkyPilot syncs and a JobSet's image holds as its working folder (a Ray job:
as given, relative to the folder `ray job submit --working-dir` sends, or on a file system every node sees).
"""

import dataclasses
from pathlib import Path

from acceltrain.commands.emit import jobset, ray, sbatch, skypilot
from acceltrain.commands.emit.job import (DEFAULT_MAX_RESTARTS, IMAGE_PLACEHOLDER, Job, hosts, job_name,
                                          script_in_folder)
from acceltrain.errors import UsageError
from acceltrain.options import Checkpoints

ENGINES = ("jobset", "sbatch", "skypilot", "ray")


def emit(engine: str, target: str, script: str, argv=(), *, name: str | None = None, nodes: int | None = None,
         processes: int | None = None, image: str | None = None, checkpoints: Checkpoints | None = None,
         compile_cache_dir: str | None = None, max_restarts: int | None = None, run_flags=(),
         grace_period: int | str | None = None, queue: str | None = None, priority_class: str | None = None,
         exclusive_topology: str | None = None, wheel: str | None = None) -> str:
    """The artifact's text. `run_flags`: acceltrain run's flags to pass on (its settings ...), checked by the caller as
    `launch` checks them; `checkpoints`: the job's (its folder: where its engine shares one by default, see
    shared_checkpoints), always resumed. The JobSet's own settings (grace_period ... exclusive_topology) and
    SkyPilot's wheel are refused with another engine."""
    module = _module(engine)
    own = {("jobset",): {"--grace-period": grace_period, "--queue": queue, "--priority-class": priority_class,
                         "--exclusive-topology": exclusive_topology, "--image": image},
           ("jobset", "ray"): {"--max-restarts": max_restarts}, ("skypilot",): {"--wheel": wheel}}
    for owners, flags in own.items():
        for flag, value in flags.items():
            if value is not None and engine not in owners:
                named = " or ".join(f"--emit {owner}" for owner in owners)
                raise UsageError(f"Received {flag} {value} with --emit {engine}: it is a setting of {named} only. "
                                 f"Leave it out, or pass {named}.")
    where = hosts(target, nodes, processes)
    module.check_hosts(where)
    if max_restarts is not None and (isinstance(max_restarts, bool) or not isinstance(max_restarts, int)
                                     or max_restarts < 0):
        raise UsageError(f"Received --max-restarts {max_restarts!r}. Expected a whole number of at least 0.")
    jobset.check_options(None, queue, priority_class, exclusive_topology)
    grace_seconds, grace_reason = jobset.grace(grace_period)
    if engine == "skypilot":
        script = script_in_folder(script, engine, "which SkyPilot syncs to every host as the task's workdir")
    elif engine == "jobset":
        script = script_in_folder(script, engine, "which the image must hold as its working folder",
                                  image_paths=True)
    checkpoints = dataclasses.replace(checkpoints or shared_checkpoints(engine), resume=True)
    cache = compile_cache_dir or module.SHARED_DEFAULT + "/compile-cache"
    run = ("acceltrain", "run", *run_flags, *checkpoints.as_args(), script, *argv)
    job = Job(job_name(name, script), where, run, str(checkpoints.dir), cache, image or IMAGE_PLACEHOLDER,
              DEFAULT_MAX_RESTARTS if max_restarts is None else max_restarts, grace_seconds=grace_seconds,
              grace_reason=grace_reason,
              queue=queue, priority_class=priority_class, exclusive_topology=exclusive_topology, wheel=wheel)
    return module.render(job)


def check_artifact(path) -> tuple[str, list[str]]:
    """(engine, problems) of an artifact file, a user's edit of one acceltrain emitted; [] when it is sound."""
    try:
        text = Path(path).read_text()
    except UnicodeDecodeError:
        text = ""  # a binary file: none of the three, said below
    for engine in ENGINES:
        module = _module(engine)
        if module.recognizes(text):
            return engine, module.check(text)
    raise UsageError(f"Received --artifact {path}, which is none of {', '.join(ENGINES)}: a JobSet YAML "
                     "(kind: JobSet), an sbatch script (#SBATCH lines), a SkyPilot task YAML (run:) or a Ray job's "
                     "driver (run_job). Pass a "
                     "file `acceltrain launch --emit` wrote, or your edit of one.")


def shared_checkpoints(engine: str, folder: str | None = None, every: str | None = None,
                       keep: int | None = None) -> Checkpoints:
    """The checkpoints of a job `engine` runs (None: the default), checked as `launch` checks them: in `folder`, else
    in the folder the engine shares by default (the folder itself aside: it is on the cluster)."""
    return Checkpoints.of(folder or _module(engine).SHARED_DEFAULT + "/checkpoints", every, keep, resume=True)


def _module(engine: str):
    if engine not in ENGINES:
        raise UsageError(f"Received --emit {engine!r}. Valid: {', '.join(ENGINES)}.")
    return {"jobset": jobset, "sbatch": sbatch, "skypilot": skypilot, "ray": ray}[engine]
