"""`acceltrain run --checkpoint-dir DIR SCRIPT.py`: the script's fit calls made exact and resumable.

    flags = check_flags("ckpt", resume=False, checkpoint_every="200 steps", keep_checkpoints=None)

Each `model.fit` the script makes goes through Runtime.fit's checkpointed path (training/resumable.py)
with the script's own arguments: SIGTERM or SIGINT finishes the step, writes a checkpoint and stops the
script with the resume hint; the same command plus --resume continues exactly where it stopped.

- The Nth fit call of the script keeps its checkpoints in DIR/fit-N. On --resume every fit restores
  its own: one that had finished trains no further (its final weights are restored), the one that was
  stopped continues, those that had not started start. So a script with several fits (pretraining,
  then fine-tuning) resumes too, provided it makes them in the same order each run.
- What exact resume cannot honour is refused before training, naming the argument: inputs that cannot
  be rewound (a generator, a Grain dataset), `steps_per_epoch`, `initial_epoch`,
  `shuffle="batch"`. The way out is to run without --checkpoint-dir. (`sample_weight` follows its samples
  through each epoch's order; `validation_split` is made once, before the first epoch.)
- Differences from the script's plain fit, all of Runtime.fit's path: each epoch's order is drawn
  from (seed 0, epoch) rather than by Keras; the few samples that would make a last batch uneven over
  the replicas are left out of each epoch after its shuffle; the run stops with TrainingDiverged when
  the loss is NaN or stuck at chance. The script's callbacks see one training run
  (`on_train_begin` and `on_train_end` once: resumable._one_training_run), though Keras's fit is called
  once an epoch; on resume, their own state (EarlyStopping's patience count) starts afresh.
"""

from dataclasses import dataclass
from pathlib import Path

from acceltrain import data
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
    from acceltrain.training.checkpoint import Every  # numpy only, though training/ is imported after connect()

    every = DEFAULT_EVERY if checkpoint_every is None else checkpoint_every
    Every.parse(every, "--checkpoint-every")
    keep = positive_int(DEFAULT_KEEP if keep_checkpoints is None else keep_checkpoints, "--keep-checkpoints")
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


class CheckpointedFits:
    """Layer "checkpointed" (keras_internals.LAYERS): the script's own fit calls, each trained by Runtime.fit
    with checkpoints in its own DIR/fit-N instead of going on to Keras's fit."""

    def __init__(self, runtime, flags: CheckpointFlags, resume_command: str):
        self.runtime = runtime
        self.flags = flags
        self.resume_command = resume_command  # said when a signal stops the script
        self.fits = 0

    def __call__(self, call, proceed):
        from acceltrain.training.resumable import Interrupted

        if call.name != "fit":
            return proceed(call)
        kwargs = runtime_fit_arguments(call.arguments())
        kwargs["steps_per_execution"] = call.model.steps_per_execution  # the script's own, as a plain fit keeps it
        self.fits += 1
        folder = self.flags.folder / f"fit-{self.fits}"
        try:
            return self.runtime.fit(call.model, checkpoint_dir=folder, resume=self.flags.resume,
                                    checkpoint_every=self.flags.every, keep_checkpoints=self.flags.keep, **kwargs)
        except Interrupted as stopped:
            again = "the same command, as it is" if self.flags.resume else "the same command plus --resume"
            raise Interrupted(stopped.signum, stopped.checkpoint, f"{again} ({self.resume_command})") from None


def runtime_fit_arguments(arguments: dict) -> dict:
    """Runtime.fit's keyword arguments for a script's Keras fit(**arguments); what exact resume cannot
    honour raises UsageError naming it."""
    arguments = dict(arguments)
    arguments.update({name: data.tensors_as_numpy(arguments[name]) for name in ("x", "y", "sample_weight")
                      if data.has_tensors(arguments.get(name))})  # a tf.Tensor: numpy arrays, rewound as they are
    x = arguments.get("x")
    if not (data.is_arrays(x) or data.is_dataset(x) or data.is_py_dataset(x) or _is_grain_loader(x)):
        _refuse(f"x of type {type(x).__name__}", "exact resume rewinds numpy arrays, a tf.data.Dataset, a "
                "keras.utils.PyDataset or a Grain DataLoader to the step a checkpoint was written at; a generator or a "
                "Grain dataset (MapDataset, IterDataset) cannot be rewound by acceltrain: pass one of those, or run "
                "without --checkpoint-dir")
    given = {"steps_per_epoch": arguments.get("steps_per_epoch") is not None,
             "initial_epoch": arguments.get("initial_epoch", 0) != 0}
    for name in (name for name, is_given in given.items() if is_given):
        _refuse(f"{name}={_short(arguments[name])}", _WHY[name])
    if not isinstance(arguments.get("callbacks") or [], (list, tuple)):
        _refuse("callbacks=<a CallbackList>", "each epoch's fit needs the script's callbacks as a list")
    if arguments.get("shuffle") == "batch":
        _refuse("shuffle='batch'", "each epoch's order is drawn whole from (seed, epoch)")
    for name in ("steps_per_epoch", "initial_epoch"):
        arguments.pop(name, None)
    if data.is_arrays(x) and arguments.get("batch_size") is None:
        arguments["batch_size"] = data.keras_batch(None)  # Keras's default, made explicit
    arguments["callbacks"] = list(arguments.get("callbacks") or ())
    return arguments


def _is_grain_loader(x) -> bool:
    return data.is_grain(x) and hasattr(x, "_data_source")  # a DataLoader (its checkpointable iterator), not a dataset


_WHY = {
    "steps_per_epoch": "an epoch is one pass over the data, numbered so a checkpoint can say where it stopped",
    "initial_epoch": "where training starts is the newest checkpoint's business (--resume)",
}


def _refuse(received: str, why: str) -> None:
    raise UsageError(f"Received model.fit({received}) under --checkpoint-dir, which cannot resume it exactly: "
                     f"{why}. Run without --checkpoint-dir to train as the script says.")


def _short(value) -> str:
    return f"<array of {len(value)}>" if hasattr(value, "__len__") and not isinstance(value, str) else repr(value)
