"""Checkpoints that let a dropped session resume exactly where it stopped.

A checkpoint is a folder `checkpoints/epoch-0003-step-00025/` holding the weights (model and optimizer:
Keras's .weights.h5) and `state.json` (epoch, step, seed, replicas, the history so far, and the
weights file's sha256). It is written in a hidden folder and renamed into place, so a run killed at
any instant leaves the previous checkpoint whole; a checkpoint whose files do not match its state.json
is reported and skipped for the one before.

Exactness: the data order of each epoch is a function of (seed, epoch) (`epoch_order`), never of a
stream that restarts, and the step within an epoch is saved; so a resumed run feeds the same batches
in the same order to the same weights and optimizer state as an uninterrupted one.
"""

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from acceltrain import log
from acceltrain.errors import AcceltrainError, UsageError, positive_int
from acceltrain.options import Every  # noqa: F401  the cadence, parsed once by options.Checkpoints

WEIGHTS = "checkpoint.weights.h5"
STATE = "state.json"
_NAME = re.compile(r"^epoch-(\d+)-step-(\d+)$")


@dataclass
class State:
    """Where training stands: `epoch` epochs done, plus `step` batches of the next one."""

    epoch: int = 0
    step: int = 0
    seed: int = 0
    num_replicas: int = 1
    history: dict = field(default_factory=dict)  # Keras's per-epoch logs so far
    epoch_seconds: list = field(default_factory=list)
    weights_sha256: str = ""
    # {"trainable"|"non_trainable"|"optimizer": [[path, shape, dtype], ...]} of the model that wrote it, so a
    # resume can tell another model from a damaged file. Empty in checkpoints written before it was kept.
    variables: dict = field(default_factory=dict)
    # A callback of the user's (EarlyStopping) ended the run at `epoch`: a resume restores it and trains no further.
    stopped_early: bool = False


def epoch_order(seed: int, epoch: int, num_samples: int) -> np.ndarray:
    """The order of the samples in `epoch`: the same for the same (seed, epoch), on any hardware."""
    return np.random.default_rng([seed, epoch]).permutation(num_samples)


class Checkpoints:
    """The checkpoints folder of one run: save, list, and find the newest good one."""

    def __init__(self, folder: Path, keep: int = 2, writer: bool = True):
        positive_int(keep, "keep_checkpoints")
        self.folder = Path(folder)
        self.keep = keep
        self.writer = writer  # in a multi-process job, process 0 alone writes
        self._first_write_seconds: float | None = None

    def save(self, model, state: State) -> Path:
        """Write a checkpoint atomically, then delete all but the newest `keep`."""
        started = time.perf_counter()
        saved = self._save(model, state)
        if self._first_write_seconds is None:
            self._first_write_seconds = time.perf_counter() - started
        return saved

    def _save(self, model, state: State) -> Path:
        final = self.folder / f"epoch-{state.epoch:04d}-step-{state.step:05d}"
        if not self.writer:
            save_where_nobody_looks(model.save_weights, WEIGHTS)
            return final
        partial = self.folder / f".{final.name}.{os.getpid()}.partial"
        try:
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            model.save_weights(partial / WEIGHTS)
            state.weights_sha256 = _sha256(partial / WEIGHTS)
            state.variables = variable_signature(model)
            (partial / STATE).write_text(json.dumps(asdict(state), indent=1))
            _fsync_folder_files(partial)
            if final.exists():  # the same point saved again (a resumed run): replace it
                shutil.rmtree(final)
            os.replace(partial, final)
        except OSError as error:
            shutil.rmtree(partial, ignore_errors=True)
            raise AcceltrainError(
                f"Could not write the checkpoint {final} ({error.strerror or error}). The previous checkpoint "
                "is intact. Free some disk space or pass another --out, then resume with --resume."
            ) from None
        for old in to_prune(self.list(), final, self.keep):
            shutil.rmtree(old, ignore_errors=True)
        return final

    def list(self) -> list[Path]:
        """Complete checkpoint folders, oldest first."""
        if not self.folder.is_dir():
            return []
        found = [p for p in self.folder.iterdir() if p.is_dir() and _NAME.match(p.name)]
        return sorted(found, key=lambda p: tuple(int(g) for g in _NAME.match(p.name).groups()))

    def latest(self) -> tuple[Path, State] | None:
        """The newest checkpoint that reads back whole; damaged ones are reported and skipped."""
        return newest_readable(self.list(), read_state)

    def restore_latest(self, model) -> tuple[Path, State] | None:
        """Restore the newest good checkpoint into `model`; returns it and its State, or None if there is none.
        Raises UsageError when every one is damaged or another model wrote them (restore_newest)."""
        return restore_newest(self.folder, self.list(), read_state, restore, model)

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def open(self) -> None:
        """Nothing to start: .weights.h5 needs only Keras."""

    def first_write_seconds(self) -> float | None:
        """How long this run's first checkpoint took to write, from the save call to its files complete (training
        waits for all of it here); None before it."""
        return self._first_write_seconds

    @staticmethod
    def agree(value: int) -> int:
        """`value` as every process of the job takes it: one process here."""
        return value

    def close(self) -> None:
        """Nothing in flight: each save is written before it returns."""

    def preempted_at(self, step: int) -> bool:
        """Single-process jobs learn of SIGTERM from their own signal handler (see resumable)."""
        return False

    @staticmethod
    def polls_made() -> int:
        return 0  # no sync point polled: one process


def save_where_nobody_looks(save, name: str) -> None:
    """`save(path)` into a folder thrown away after: a process of a job that does not write still saves, as reading
    the weights is a step every process takes (or process 0 waits for ever)."""
    with tempfile.TemporaryDirectory(prefix="acceltrain-discarded-") as folder:
        save(Path(folder) / name)


def to_prune(folders: list[Path], saved: Path, keep: int) -> list[Path]:
    """The checkpoints to delete once `saved` is written: those after it, which a run resumed from an older
    one has left behind (damaged, skipped at the resume), then all but the newest `keep` up to it. Never the
    run's own newest: a stale checkpoint numbered after them does not push them out."""
    position = _position(saved)
    stale = [folder for folder in folders if _position(folder) > position]
    upto = [folder for folder in folders if _position(folder) <= position]
    return stale + upto[: max(len(upto) - keep, 0)]


def _position(folder: Path) -> tuple[int, int]:
    return tuple(int(group) for group in _NAME.match(folder.name).groups())


def saved_variables(model) -> dict:
    """What a checkpoint holds, in the order the model creates it: weights, the rest of the layers' state
    (seed generators, batch-norm statistics), and the optimizer's. Lists, not Keras's state tree by
    name, so a model whose layers were named otherwise (another `dense_3`) still resumes, as with
    .weights.h5. Metrics are left out: Keras resets them at each epoch's start."""
    optimizer = model.optimizer.variables if model.optimizer is not None else []
    return {"trainable": list(model.trainable_variables), "non_trainable": list(model.non_trainable_variables),
            "optimizer": list(optimizer)}


def variable_signature(model) -> dict:
    """State.variables: each saved variable's path, shape and dtype, in saved_variables' order."""
    return {group: [[variable.path, list(variable.shape), str(variable.dtype)] for variable in variables]
            for group, variables in saved_variables(model).items()}


def model_difference(model, state: State) -> str | None:
    """What tells `model` from the one that wrote `state` (the first variable that does not match), or None.
    None too for a checkpoint that did not record its model: then only loading it can tell."""
    if not state.variables:
        return None
    here = variable_signature(model)
    for group in ("trainable", "non_trainable", "optimizer"):
        mine, saved = here[group], state.variables.get(group, [])
        for (path, shape, dtype), (saved_path, saved_shape, saved_dtype) in zip(mine, saved):
            if list(shape) != list(saved_shape) or dtype != saved_dtype:
                return (f"{group} variable {path} is {tuple(shape)} {dtype} here; the checkpoint's {saved_path} is "
                        f"{tuple(saved_shape)} {saved_dtype}")
        if len(mine) != len(saved):
            first = (mine[len(saved)] if len(mine) > len(saved) else saved[len(mine)])[0]
            return f"the model has {len(mine)} {group} variables here, the checkpoint {len(saved)} (first unmatched: {first})"
    return None


def restore_newest(folder: Path, folders: list[Path], read, load, model) -> tuple[Path, State] | None:
    """Load the newest of `folders` (oldest first) that reads back whole into `model`: `read(folder)` gives its
    State, `load(model, folder)` its arrays. Damaged ones are reported and skipped for the one before.

    Three outcomes a resume must not confuse: no checkpoint (None: start from the beginning); every one
    damaged, or one written by a different model (UsageError, exit 2: starting over would quietly drop them,
    and resuming would be wrong), each saying what it found and how to start over.
    """
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)  # its variables are part of the comparison
    start_over = (f"To start over instead, remove {folder} or train into another folder (acceltrain train: "
                  "--overwrite)")
    damaged = []
    for candidate in reversed(folders):
        try:
            state = read(candidate)
            difference = model_difference(model, state)
            if difference is None:
                load(model, candidate)
        except Exception as error:  # noqa: BLE001  (h5py, Orbax and tensorstore raise many kinds for a damaged file)
            damaged.append(f"{candidate.name}: {_first_line(error)}")
            log.warn(f"skipping damaged checkpoint {candidate.name}: {_first_line(error)}")
            continue
        if difference is not None:
            raise UsageError(f"The checkpoint {candidate} was written by a different model: {difference}. Resuming "
                             f"would load weights that do not fit this model. Resume with the model that wrote it. "
                             f"{start_over}.")
        return candidate, state
    if damaged:
        raise UsageError(f"Every checkpoint in {folder} is damaged ({'; '.join(damaged)}): there is nothing to resume "
                         f"from, and they are left as they are. {start_over}.")
    return None


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def newest_readable(folders: list[Path], read) -> tuple[Path, State] | None:
    """The newest of `folders` (oldest first) whose State `read(folder)` reads back, with it; damaged ones
    are reported and skipped."""
    for candidate in reversed(folders):
        try:
            return candidate, read(candidate)
        except (OSError, ValueError, TypeError) as error:
            log.warn(f"skipping damaged checkpoint {candidate.name}: {error}")
    return None


def read_state(folder: Path) -> State:
    """The State of an .weights.h5 checkpoint, checked against its weights' sha256."""
    state = State(**json.loads((folder / STATE).read_text()))
    if _sha256(folder / WEIGHTS) != state.weights_sha256:
        raise ValueError("the weights do not match their recorded sha256 (truncated or corrupt)")
    return state


def restore(model, path: Path) -> None:
    """Load model and optimizer state. The optimizer is built first, or Keras would skip its variables."""
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    model.load_weights(path / WEIGHTS)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_folder_files(folder: Path) -> None:
    for path in folder.iterdir():
        with open(path, "rb") as file:
            os.fsync(file.fileno())
