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
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from acceltrain import log
from acceltrain.errors import AcceltrainError, UsageError, positive_int

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


def epoch_order(seed: int, epoch: int, num_samples: int) -> np.ndarray:
    """The order of the samples in `epoch`: the same for the same (seed, epoch), on any hardware."""
    return np.random.default_rng([seed, epoch]).permutation(num_samples)


@dataclass(frozen=True)
class Every:
    """How often to checkpoint: every `count` steps, or every `count` epochs."""

    count: int = 1
    unit: str = "epochs"  # "epochs" | "steps"

    @classmethod
    def parse(cls, text: str, name: str = "--checkpoint-every") -> "Every":
        """'2' or '2 epochs' → every 2 epochs; '100 steps' → every 100 steps. `name`: what the user set,
        the CLI flag or the Python argument (checkpoint_every), named in the error."""
        match = re.fullmatch(r"\s*(\d+)\s*(steps?|epochs?)?\s*", str(text))
        if not match or int(match.group(1)) < 1:
            shown = f"{name} {text!r}" if name.startswith("--") else f"{name}={text!r}"
            raise UsageError(f"Received {shown}. Expected a count and a unit, e.g. "
                             "'1 epoch' (the default), '3 epochs' or '200 steps'.")
        unit = "steps" if (match.group(2) or "epochs").startswith("step") else "epochs"
        return cls(int(match.group(1)), unit)


class Checkpoints:
    """The checkpoints folder of one run: save, list, and find the newest good one."""

    def __init__(self, folder: Path, keep: int = 2, writer: bool = True):
        positive_int(keep, "keep_checkpoints")
        self.folder = Path(folder)
        self.keep = keep
        self.writer = writer  # in a multi-process job, process 0 alone writes

    def save(self, model, state: State) -> Path:
        """Write a checkpoint atomically, then delete all but the newest `keep`."""
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
        for old in self.list()[: -self.keep]:
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
        """Restore the newest good checkpoint into `model`; returns it and its State, or None if there is none."""
        found = self.latest()
        if found is not None:
            restore(model, found[0])
        return found

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def close(self) -> None:
        """Nothing in flight: each save is written before it returns."""

    def preempted_at(self, step: int) -> bool:
        """Single-process jobs learn of SIGTERM from their own signal handler (see resumable)."""
        return False


def save_where_nobody_looks(save, name: str) -> None:
    """`save(path)` into a folder thrown away after: a process of a job that does not write still saves, as reading
    the weights is a step every process takes (or process 0 waits for ever)."""
    with tempfile.TemporaryDirectory(prefix="acceltrain-discarded-") as folder:
        save(Path(folder) / name)


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
