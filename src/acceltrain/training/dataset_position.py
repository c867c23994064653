"""Exact resume for tf.data.Dataset inputs and Grain DataLoaders: where the data stood when each epoch began.

A dataset's order cannot be drawn from (seed, epoch) as arrays' is: its shuffle buffers and the seeds
of a reshuffling `shuffle` (which depend on how many passes this process has made) live in TensorFlow.
So each epoch is one pass, an iterator acceltrain makes and feeds to Keras, and at the pass's start the
iterator's state (its seeds included) is written with tf.train.Checkpoint to `checkpoints/data/epoch-E`.
A run resumed at step s of epoch E restores that state into a new iterator and reads s batches past
it: the same batches follow, in the same order, as in the uninterrupted run.

Saved at the epoch's start, not with each checkpoint, because Keras reads ahead of the step it trains
(its prefetch): the iterator's own position is a few batches past the last step done. The cost is one
write per epoch, as large as the pipeline's buffers (a `shuffle(10_000)` of images holds 10,000 images).
"""

import contextlib
import itertools
import re
import shutil
import warnings
from pathlib import Path

from acceltrain import data, streams
from acceltrain.errors import AcceltrainError, UsageError

_NAME = re.compile(r"^epoch-(\d+)(-step-\d+)?$")


class DatasetFeed:
    """One epoch of `dataset` at a time for Keras's fit, from one iterator whose epoch starts are saved."""

    def __init__(self, dataset, folder: Path, steps_per_epoch: int | None = None):
        # Numbers the steps of a checkpoint: at least the batches of a pass (one more where the last,
        # partial batch is dropped), the same on every run.
        self.steps_per_epoch = data.num_batches(dataset) or steps_per_epoch
        if not self.steps_per_epoch:
            raise UsageError(
                "Received checkpoint_dir with a tf.data.Dataset of unknown or infinite length. Exact resume "
                "counts the batches of each pass: end the dataset (no .repeat()), or give it its length "
                "with dataset.apply(tf.data.experimental.assert_cardinality(N_BATCHES)).")
        self.dataset = dataset
        self.folder = Path(folder)
        self._iterator = None
        self._resumed = False

    def epoch(self, epoch: int, first_step: int, keep_from: int = 0):
        """The batches of `epoch` from `first_step` on (a generator). Epochs are asked for in order; the
        first one asked for is where the run starts or resumes. Saved epoch starts before `keep_from`
        (the oldest checkpoint's epoch) are deleted."""
        self._iterator = iter(self.dataset)  # this epoch's pass
        skip = first_step
        if not self._resumed and (epoch or first_step):
            skip = first_step - self._restore(epoch, first_step)
        self._resumed = True
        if first_step == 0:
            self._save(epoch)
        for _ in range(skip):  # the batches of this epoch trained before the stop
            next(self._iterator)
        self._prune(keep_from)
        return self._rest_of(first_step)

    def _rest_of(self, first_step: int):
        return _rest_of(self._iterator)

    def saved_at(self, epoch: int, step: int) -> None:
        """A checkpoint was written at `step` of `epoch`: tf.data's position is only saved at epoch starts."""

    def _write(self, folder: Path, step: int) -> None:
        import tensorflow as tf

        tf.train.Checkpoint(iterator=self._iterator).write(str(folder / "position"))

    def _read(self, folder: Path) -> None:
        import tensorflow as tf

        tf.train.Checkpoint(iterator=self._iterator).read(str(folder / "position")).assert_consumed()

    def _save(self, epoch: int, step: int = 0) -> None:
        final = self.folder / (f"epoch-{epoch:04d}" + (f"-step-{step:05d}" if step else ""))
        partial = self.folder / f".{final.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        self._write(partial, step)
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)  # atomic: a kill leaves the previous epochs' positions whole

    def _restore(self, epoch: int, step: int) -> int:
        """Where the data stood at `step` of `epoch` (saved_at), else at the epoch's start: returns the step restored."""
        at_step = self.folder / f"epoch-{epoch:04d}-step-{step:05d}"
        if step and at_step.is_dir():
            self._read(at_step)
            return step
        saved = self.folder / f"epoch-{epoch:04d}"
        if not saved.is_dir():
            raise AcceltrainError(
                f"The checkpoint is at epoch {epoch}, but where the dataset stood at that epoch's start "
                f"({saved}) is missing, so the run cannot resume exactly. Start again without resume.")
        self._read(saved)
        return 0

    def _prune(self, keep_from: int) -> None:
        if not self.folder.is_dir():
            return
        for path in self.folder.iterdir():
            match = _NAME.match(path.name)
            if match and int(match.group(1)) < keep_from:
                shutil.rmtree(path, ignore_errors=True)


class GrainFeed(DatasetFeed):
    """A Grain DataLoader the same way, one pass (a new iter()) an epoch, with Grain's checkpointable iterator: its
    get_state() taken before each batch it gives, and the one before the step a checkpoint is written at saved beside
    it (epoch-E-step-S/position.json), so a resume set_state()s there and reads no batch again. (Keras reads ahead of
    the step it trains: the state is the one taken before that step's batch, not the iterator's latest.)"""

    def __init__(self, loader, folder: Path):
        self.steps_per_epoch = streams.grain_num_batches(loader)
        if not self.steps_per_epoch:
            raise UsageError(
                "Received checkpoint_dir with a Grain DataLoader whose batches a pass cannot be counted without "
                "reading it. Exact resume counts the batches of each pass: give it an IndexSampler(num_epochs=1, ...) "
                "and one grain.Batch, and no filter.")
        self.dataset = loader
        self.folder = Path(folder)
        self._iterator = None
        self._resumed = False
        self._before = {}

    def _rest_of(self, first_step: int):
        self._before = {first_step: self._iterator.get_state()}  # step → the state before its batch, this epoch

        def batches():
            for step in itertools.count(first_step):
                try:
                    batch = next(self._iterator)
                except StopIteration:
                    return
                self._before[step + 1] = self._iterator.get_state()  # taken now: Keras may save before asking on
                yield batch

        return batches()

    def saved_at(self, epoch: int, step: int) -> None:
        if step in self._before:
            self._save(epoch, step)
            self._before = {k: v for k, v in self._before.items() if k >= step}

    def _write(self, folder: Path, step: int) -> None:
        (folder / "position.json").write_bytes(self._before[step] if step else self._iterator.get_state())

    def _read(self, folder: Path) -> None:
        self._iterator.set_state(_same_default_repr((folder / "position.json").read_bytes(),
                                                    repr(self.dataset._data_source)))


def _same_default_repr(state: bytes, source: str) -> bytes:
    """Grain's state with its data source's repr made the resumed one's where both are Python's default repr of the
    same class ("<module.Class object at 0x...>"): Grain checks a restored source by its repr, and a default repr holds
    the object's address, which no new process repeats, so a source without a __repr__ of its own could never resume.
    Another repr, or another class, stays as saved, for Grain to refuse."""
    import json

    saved = json.loads(state)
    default = re.compile(r"^<(.+) object at 0x[0-9a-f]+>$")
    was, now = default.match(saved.get("data_source", "")), default.match(source)
    if was and now and was.group(1) == now.group(1):
        saved["data_source"] = source
    return json.dumps(saved, indent=4).encode()


def _rest_of(iterator):
    """What is left of the pass, as the Python generator Keras takes (it refuses a tf.data iterator)."""
    yield from iterator


@contextlib.contextmanager
def end_of_pass_expected():
    """Keras warns when a generator ends before it knew how many batches it had ("Your input ran out of
    data"): for a pass fed by DatasetFeed, that end is the epoch's, as intended."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        yield
