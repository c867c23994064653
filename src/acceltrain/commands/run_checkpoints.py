"""`acceltrain run --checkpoint-dir DIR SCRIPT.py`: the script's fit calls made exact and resumable.

    flags = check_flags("ckpt", resume=False, checkpoint_every="200 steps", keep_checkpoints=None)

Each `model.fit` the script makes is trained by the runtime's own loop (slot "trained" of the one assembly,
assembly.py::Trained, as Runtime.fit(checkpoint_dir=...) is; training/resumable.py) with the script's own
arguments: SIGTERM or SIGINT finishes the step, writes a checkpoint and stops the
script with the resume hint; the same command plus --resume continues exactly where it stopped.

- The Nth fit call of the script keeps its checkpoints in DIR/fit-N. On --resume every fit restores
  its own: one that had finished trains no further (its final weights are restored), the one that was
  stopped continues, those that had not started start. So a script with several fits (pretraining,
  then fine-tuning) resumes too, provided it makes them in the same order each run.
- What exact resume cannot honour is refused before training, naming the argument: inputs that cannot
  be rewound (a generator, a Grain dataset), `steps_per_epoch`, `initial_epoch`,
  `shuffle="batch"`. The way out is to run without --checkpoint-dir. (`sample_weight` follows its samples
  through each epoch's order; `validation_split` is made once, before the first epoch.)
- Differences from the script's plain fit, all of the runtime's own loop: each epoch's order is drawn
  from (seed 0, epoch) rather than by Keras; the few samples that would make a last batch uneven over
  the replicas are left out of each epoch after its shuffle; the run stops with TrainingDiverged when
  the loss is NaN or stuck at chance. The script's callbacks see one training run
  (`on_train_begin` and `on_train_end` once: resumable._one_training_run), though Keras's fit is called
  once an epoch; on resume, their own state (EarlyStopping's patience count) starts afresh.
"""

from dataclasses import dataclass
from pathlib import Path

from acceltrain.errors import UsageError, positive_int

DEFAULT_EVERY = "auto"
DEFAULT_KEEP = 2


@dataclass(frozen=True)
class CheckpointFlags:
    """--checkpoint-dir and its companions, checked."""

    folder: Path
    resume: bool = False
    every: str = DEFAULT_EVERY
    keep: int = DEFAULT_KEEP

    def as_args(self) -> list[str]:
        """The same flags for `acceltrain run` (what `launch` passes on to each process)."""
        return ["--checkpoint-dir", str(self.folder), "--checkpoint-every", self.every,
                "--keep-checkpoints", str(self.keep), *(["--resume"] if self.resume else [])]


def check_flags(checkpoint_dir, resume: bool = False, checkpoint_every: str | None = None,
                keep_checkpoints: int | None = None) -> CheckpointFlags | None:
    """The flags checked before anything starts or is written; None without --checkpoint-dir."""
    if checkpoint_dir is None:
        given = {"--resume": resume, "--checkpoint-every": checkpoint_every, "--keep-checkpoints": keep_checkpoints}
        for flag, value in given.items():
            if value not in (None, False):
                raise UsageError(f"Received {flag} without --checkpoint-dir. Pass --checkpoint-dir DIR too (the "
                                 f"folder the checkpoints go in), or leave out {flag}.")
        return None
    every, keep = check_cadence(checkpoint_every, keep_checkpoints)
    folder = Path(checkpoint_dir)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"Received --checkpoint-dir {checkpoint_dir!r}, which is a file. Pass a folder (new, "
                         "or one an earlier run checkpointed into, with --resume).")
    held = sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []
    if held and not resume:
        shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        raise UsageError(f"Received --checkpoint-dir {checkpoint_dir!r}, which already holds files ({shown}). "
                         "Pass --resume to continue from its checkpoints, or a new or empty folder to start over.")
    return CheckpointFlags(folder, bool(resume), every, keep)


def check_cadence(checkpoint_every: str | None = None, keep_checkpoints: int | None = None) -> tuple[str, int]:
    """--checkpoint-every and --keep-checkpoints checked (None: the default): what `run`, `launch` and `launch --emit`
    check alike, the folder aside (an emitted job's is on the cluster)."""
    from acceltrain.training.checkpoint import Every  # numpy only, though training/ is imported after connect()

    every = DEFAULT_EVERY if checkpoint_every is None else checkpoint_every
    Every.parse(every, "--checkpoint-every")
    return every, positive_int(DEFAULT_KEEP if keep_checkpoints is None else keep_checkpoints, "--keep-checkpoints")


def checkpointing(flags: CheckpointFlags, resume_command: str):
    """The flags as the runtime's own loop takes them (assembly.py's slot "trained"): each of the script's
    fits keeps its checkpoints in DIR/fit-N, and a signal's stop says how to resume (`resume_command`: the user's
    command plus --resume)."""
    from acceltrain import assembly

    again = "the same command, as it is" if flags.resume else "the same command plus --resume"
    return assembly.Checkpointing(flags.folder, resume=flags.resume, every=flags.every, keep=flags.keep, per_fit=True,
                                  resume_hint=f"{again} ({resume_command})")
