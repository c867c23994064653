"""`acceltrain launch --emit ENGINE --target TARGET SCRIPT.py [ARGS]`: what an engine takes to run the script,
unchanged, as one JAX job with `acceltrain run` on every host. One module per engine renders it (jobset.py,
sbatch.py, skypilot.py, ray.py) from one plain `Job`; `check_artifact` reads one back (`acceltrain doctor --artifact`).

Every artifact runs `acceltrain run --checkpoint-dir SHARED --resume SCRIPT ARGS` with JAX's persistent
compilation cache in a shared folder (JAX_COMPILATION_CACHE_DIR): a restarted or requeued job resumes from the
newest checkpoint and finds its programs compiled. An engine restarts the job on exit code 42 (and 127-255,
a process killed by a signal), xpk's convention; any other failure is final.
"""

from pathlib import Path

from acceltrain.commands.emit import jobset, ray, sbatch, skypilot
from acceltrain.commands.emit.job import DEFAULT_MAX_RESTARTS, IMAGE_PLACEHOLDER, Job, job_name, layout
from acceltrain.errors import UsageError

ENGINES = ("jobset", "sbatch", "skypilot", "ray")


def emit(engine: str, target: str, script: str, argv=(), *, name: str | None = None, nodes: int | None = None,
         processes: int | None = None, image: str | None = None, checkpoint_dir: str | None = None,
         compile_cache_dir: str | None = None, max_restarts: int | None = None, run_flags=()) -> str:
    """The artifact's text. `run_flags`: acceltrain run's flags to pass on (the checkpoint cadence ...)."""
    if engine not in ENGINES:
        raise UsageError(f"Received --emit {engine!r}. Valid: {', '.join(ENGINES)}.")
    module = _module(engine)
    where = layout(target, nodes, processes)
    module.check_layout(where)
    if max_restarts is not None and (isinstance(max_restarts, bool) or not isinstance(max_restarts, int)
                                     or max_restarts < 0):
        raise UsageError(f"Received --max-restarts {max_restarts!r}. Expected a whole number of at least 0.")
    checkpoints = checkpoint_dir or module.SHARED_DEFAULT + "/checkpoints"
    cache = compile_cache_dir or module.SHARED_DEFAULT + "/compile-cache"
    run = ("acceltrain", "run", *run_flags, "--checkpoint-dir", checkpoints, "--resume", script, *argv)
    job = Job(job_name(name, script), where, run, checkpoints, cache, image or IMAGE_PLACEHOLDER,
              DEFAULT_MAX_RESTARTS if max_restarts is None else max_restarts)
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
                     "(kind: JobSet), an sbatch script (#SBATCH lines), a SkyPilot task YAML (run:) or a Ray job's driver (run_job). Pass a "
                     "file `acceltrain launch --emit` wrote, or your edit of one.")


def _module(engine: str):
    return {"jobset": jobset, "sbatch": sbatch, "skypilot": skypilot, "ray": ray}[engine]
