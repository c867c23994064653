"""tf.data datasets: their batch, the cut of each batch, a process's share read at the pipeline's source, the whole
read (evaluate, predict), and the resume position of a fit with checkpoints (DatasetFeed).

Recognised and handled through the dataset's own methods, so this module imports no framework at module level (on
JAX, Keras reads tf.data too); TensorFlow is imported inside the functions that need it (a tf.data dataset exists:
TensorFlow is loaded already). A dataset brings its own global batch.
"""

import collections
import contextlib
import re
import shutil
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

from acceltrain import log
from acceltrain.errors import AcceltrainError, UsageError
from acceltrain.inputs.arrays import join_batches, leaves, places_of_every_nth, raise_indivisible, read_batches


def _batch_dims(dataset) -> list:
    """The leading dimension of each part of an element (None where it varies); [] if one is a scalar."""
    dims = []
    for spec in leaves(dataset.element_spec):
        if spec.shape.rank is not None and spec.shape.rank == 0:
            return []
        dims.append(spec.shape[0] if spec.shape.rank is not None else None)
    return dims


def dataset_batch_size(dataset, *, name: str = "x") -> int:
    """The global batch of a batched dataset: its static batch dimension, else its one batch op's size where its
    length is known, else the size of its first batch.

    Reading the first batch runs the pipeline up to it once (a shuffle fills its buffer).
    """
    dims = _batch_dims(dataset)
    known = {dim for dim in dims if dim is not None}
    if not dims or len(known) > 1:
        raise UsageError(
            f"{name} is a tf.data.Dataset of single samples (element_spec: {dataset.element_spec}). "
            "Batch it with the global batch, e.g. dataset.batch(1024): the batch is split over the replicas."
        )
    if known:
        return known.pop()
    empty = UsageError(f"{name} is an empty tf.data.Dataset: there is nothing to train or evaluate on.")
    count = int(dataset.cardinality())
    if count == 0:
        raise empty
    batch = _graph(dataset).batch_size if count != -2 else None  # -2: unknown (a filter may have left none)
    if batch:
        return batch  # its one batch op's: nothing read (a process reading its share at the source reads no more)
    for element in dataset.take(1):
        return int(leaves(element)[0].shape[0])
    raise empty


def check_dataset(dataset, batch_size, num_replicas: int, *, name: str = "x") -> int:
    """The dataset is batched, by a batch that splits evenly over the replicas. Returns that batch."""
    batch = dataset_batch_size(dataset, name=name)
    if batch_size is not None and batch_size != batch:
        raise UsageError(
            f"Received batch_size={batch_size} with {name}, a dataset batched by {batch}. A dataset brings its "
            f"own batch: leave batch_size out, or batch the dataset by {batch_size} (dataset.rebatch({batch_size}))."
        )
    if batch % num_replicas:
        raise_indivisible(f"{name} is batched by {batch}, which does", batch, num_replicas, "Batch it by a multiple")
    return batch


def has_static_batch(dataset) -> bool:
    """Every batch has the same, known size (batched with drop_remainder=True, or rebatched so)."""
    dims = _batch_dims(dataset)
    return bool(dims) and None not in dims


def drop_remainder(dataset, batch_size: int):
    """The dataset with every batch full, so the batch dimension is static (XLA on TPU compiles one shape)
    and each batch splits evenly. Returns (dataset, changed); at most batch_size - 1 samples a pass go."""
    if has_static_batch(dataset):
        return dataset, False
    return dataset.rebatch(batch_size, drop_remainder=True), True


def num_batches(dataset) -> int | None:
    """Batches in one pass over the dataset, where TensorFlow knows it without reading the data."""
    count = int(dataset.cardinality())
    return count if count >= 0 else None


def dataset_to_arrays(dataset, *, name: str = "x"):
    """Every batch of a finite (x, y) or x-only dataset, joined into numpy arrays. Returns (x, y or None)."""
    batches = list(dataset.as_numpy_iterator())
    if not batches:
        raise UsageError(f"{name} is an empty tf.data.Dataset: there is nothing to evaluate.")
    first = batches[0]
    if isinstance(first, tuple) and len(first) == 2:
        return join_batches([b[0] for b in batches]), join_batches([b[1] for b in batches])
    if isinstance(first, tuple) and len(first) != 1:
        raise UsageError(
            f"{name} yields {len(first)}-part elements; across several replicas on this backend a dataset is "
            "evaluated from memory, which takes (x, y) or x. Pass the arrays (x, y, sample_weight=...) instead."
        )
    return join_batches([b[0] if isinstance(b, tuple) else b for b in batches]), None


def dataset_part(dataset, num_replicas: int, process_index: int = 0, num_processes: int = 1):
    """`batch_part` on every batch of a tf.data dataset, in its graph (the batches it leaves empty skipped)."""
    import tensorflow as tf  # a tf.data dataset exists: TensorFlow is loaded already

    def part(*element):
        element = element[0] if len(element) == 1 else element
        rows = tf.shape(tf.nest.flatten(element)[0])[0]
        keep = rows - rows % num_replicas
        return tf.nest.map_structure(lambda t: t[:keep][process_index::num_processes], element)

    def not_empty(*element):
        return tf.shape(tf.nest.flatten(element)[0])[0] > 0

    parted = dataset.map(part)  # no parallel calls: in order (deterministic= would only warn)
    # whole batches of a known size (checked to divide) stay whole: no filter, so the dataset keeps its length
    return parted if has_static_batch(dataset) else parted.filter(not_empty)


# --- A tf.data pipeline read at its source ------------------------------------------------------------------------
# Each process of a job reads its own share of the samples where the pipeline starts: a shard put after the dataset's
# source, not at its end (tf.data's own dataset.shard() at the end, like its DATA auto-shard policy, runs the whole
# pipeline in every process and drops the rest). Done on the dataset's graph, as tf.data's auto-shard rewrite is.

# The sources whose length the graph holds (from_tensor_slices, range), and the attribute naming their types.
_SOURCES = {"TensorSliceDataset": "Toutput_types", "RangeDataset": "output_types"}
_BATCHES = ("BatchDatasetV2", "ParallelBatchDataset", "PaddedBatchDatasetV2")  # input 1: the batch size


@dataclass
class _Graph:
    """A dataset's graph and what the share needs of it: its sources, its one batch op and that op's batch."""

    graph_def: object
    sources: list
    batch_node: object = None
    batch_size: int | None = None
    drop_remainder: bool = False


def _graph(dataset) -> _Graph:
    """Relies on: tf.data.Dataset._as_serialized_graph (TensorFlow's own; tf.distribute's auto-shard and the tf.data
    service serialize a dataset with it), and its nodes' ops and attributes as TensorFlow 2.21 writes them."""
    import tensorflow as tf

    policy = tf.data.experimental.ExternalStatePolicy.WARN  # a py_function's state stays in this process
    try:
        graph_def = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph(external_state_policy=policy).numpy())
    except (ValueError, tf.errors.OpError):  # not serializable (over protobuf's 2 GB? not tried here): no share
        return _Graph(None, [])
    nodes = {node.name: node for node in graph_def.node}
    datasets = {node.name for node in graph_def.node if "Dataset" in node.op}
    sources = [node for node in graph_def.node
               if node.name in datasets and not any(name.split(":")[0] in datasets for name in node.input)]
    batches = [node for node in graph_def.node if node.op in _BATCHES or node.op.startswith("Rebatch")]
    found = _Graph(graph_def, sources)
    if len(batches) == 1 and batches[0].op in _BATCHES and nodes[batches[0].input[1]].op == "Const":
        found.batch_node = batches[0]
        found.batch_size = int(tf.make_ndarray(nodes[batches[0].input[1]].attr["value"].tensor))
        last = nodes[batches[0].input[-1]]  # drop_remainder, each batch op's last input
        found.drop_remainder = last.op != "Const" or bool(tf.make_ndarray(last.attr["value"].tensor))
    return found


def source_share(dataset, process_index: int, num_processes: int, whole: bool = False):
    """This process's share of a batched tf.data pipeline, read at its source: every num_processes-th sample of each
    source (from its index; the last length % num_processes left out, so every process has as many), batched by
    batch / num_processes where the pipeline batched by the global batch. So process p's pipeline reads samples p,
    p + P, ... only, and global batch k (each process's batch k) holds, with no shuffle, the pipeline's batch k.

    None where no such share can be taken: a source other than from_tensor_slices or range (a generator, files), other
    than one batch op of a known size not dividing by the processes, a static batch (drop_remainder=True: the map
    functions after it were traced for that size), or a length per process TensorFlow does not know (a filter: the
    processes could take different numbers of steps). `whole` (evaluate, predict: read into memory, then joined): no
    sample left out, process p reading ceil((length - p) / num_processes) of them; None where a source has fewer
    samples than processes (a process would read none)."""
    import tensorflow as tf

    found = _graph(dataset)
    batch = found.batch_size
    if (not found.sources or any(node.op not in _SOURCES for node in found.sources) or not batch
            or batch % num_processes or found.drop_remainder or has_static_batch(dataset)):
        return None
    graph_def, nodes = found.graph_def, {node.name: node for node in found.graph_def.node}

    def const(name: str, value: int) -> str:
        node = graph_def.node.add(name=name, op="Const")
        node.attr["dtype"].type = tf.int64.as_datatype_enum
        node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value, tf.int64))
        return name

    found.batch_node.input[1] = const("acceltrain/batch", batch // num_processes)
    for source in found.sources:
        consts = [nodes[name].attr["value"].tensor for name in source.input]
        # A slice's length from its first tensor's shape: its values are not read (tf.make_ndarray cannot read
        # strings packed in tensor_content: "cannot create an OBJECT array from memory buffer", issue 45's text job).
        length = (consts[0].tensor_shape.dim[0].size if source.op == "TensorSliceDataset"
                  else len(range(*(int(tf.make_ndarray(const)) for const in consts))))
        if whole and length < num_processes:
            return None
        readers = [node for node in graph_def.node if source.name in node.input]
        take = graph_def.node.add(name=f"{source.name}/acceltrain/take", op="TakeDataset", input=[
            source.name, const(f"{source.name}/acceltrain/count", length if whole else length - length % num_processes)])
        shard = graph_def.node.add(name=f"{source.name}/acceltrain/shard", op="ShardDataset", input=[
            take.name, const(f"{source.name}/acceltrain/shards", num_processes),
            const(f"{source.name}/acceltrain/index", process_index)])
        for node in (take, shard):
            node.attr["output_types"].CopyFrom(source.attr[_SOURCES[source.op]])
            node.attr["output_shapes"].CopyFrom(source.attr["output_shapes"])
        shard.attr["require_non_empty"].b = False
        for reader in readers:
            reader.input[:] = [shard.name if name == source.name else name for name in reader.input]
    variant = tf.raw_ops.DatasetFromGraph(graph_def=graph_def.SerializeToString())
    shared = tf.data.experimental.from_variant(variant, structure=dataset.element_spec)
    if int(shared.cardinality()) == -2:  # tf.data.UNKNOWN_CARDINALITY
        return None
    shared._acceltrain_pipeline = dataset  # its py_functions stay registered as long as the share is read
    return shared


def batches(dataset, steps: int | None = None) -> list:
    """A finite dataset's batches (its first `steps`), as numpy arrays."""
    source = dataset.take(steps) if steps else dataset
    if not steps and int(source.cardinality()) == -1:  # tf.data.INFINITE_CARDINALITY
        raise UsageError("Received an infinite tf.data.Dataset (repeat()) without steps: it cannot be read "
                         "whole. Pass steps= (evaluate, predict) or validation_steps= (fit).")
    return read_batches(source.as_numpy_iterator(), steps)


def read_by_share(dataset, index: int, processes: int, replicas: int, shuffle: bool):
    """(this process's share of a training pipeline, read at its source, and how; or None and why it cannot be)."""
    shared = source_share(dataset, index, processes)
    if shared is None:
        return None, ("its source is not from_tensor_slices or range, or it has no single batch op of a size "
                      f"dividing by {processes} before a static shape or a filter: to read each sample once, "
                      "build it as from_tensor_slices(...)[.map/.shuffle/...].batch(global batch)")
    return shared, (f"each process's pipeline reads every {_nth(processes)} sample of its source (from its own "
                    f"index) and batches 1/{processes} of the global batch")


def whole_share(dataset, steps, index: int, processes: int):
    """((this process's batches of the whole read, each row's place in the pipeline), how); (None, why not)."""
    shared = source_share(dataset, index, processes, whole=True)
    if shared is None:
        return None, ("its source is not from_tensor_slices or range of at least as many samples as processes, "
                      f"or it has no single batch op of a size dividing by {processes} before a static shape or a "
                      "filter")
    found = batches(shared, steps)
    return (found, places_of_every_nth(found, index, processes)), (
        f"process p read samples p, p + {processes}, ... of its source")


def _nth(n: int) -> str:
    return {2: "2nd", 3: "3rd"}.get(n, f"{n}th")


# --- Exact resume: where the data stood at each checkpoint ------------------------------------------------------------
# A dataset's order cannot be drawn from (seed, epoch) as arrays' is: its shuffle buffers and the seeds
# of a reshuffling `shuffle` (which depend on how many passes this process has made) live in TensorFlow.
# So each epoch is one pass, an iterator acceltrain makes and feeds to Keras, and its state (its seeds and buffers
# included) is written with tf.train.Checkpoint to `checkpoints/data/`: at the pass's start (epoch-E), and with each
# checkpoint within the epoch (epoch-E-step-S). A run resumed at step s of epoch E restores the state saved with its
# checkpoint into a new iterator, and the same batches follow, in the same order, as in the uninterrupted run, none
# of the s before read again.
#
# Keras reads ahead of the step it trains (its prefetch): when a checkpoint is written at step s, the iterator stands
# a few batches past it. Those batches (read, not trained) are kept as they pass and saved beside the state
# (tf.data's own Dataset.save), and a resume gives them to Keras first. One pipeline cannot resume that way: a map
# drawing with tf.random's stateful ops (tf.random.uniform, tf.image.random_*), whose state tf.data does not
# checkpoint (it refuses, unless the dataset's options say experimental_external_state_policy=WARN): a new iterator
# draws them again from their seeds, as each pass of the uninterrupted run did, so that resume restores the pass's
# start and reads the s batches again, and says so.

UNSAVED = "position-not-saved.txt"  # in a saved position's folder: why tf.data could not save the iterator
_NAME = re.compile(r"^epoch-(\d+)(?:-step-(\d+))?$")
_REDRAWN = re.compile(r"^(Random(?!.*Dataset)|TruncatedNormal$|Multinomial$|ParameterizedTruncatedNormal$)")


def redrawn_randomness(dataset) -> str | None:
    """Why a position within a pass cannot be restored without reading (a function of the pipeline draws with a
    stateful random op, whose stream a new iterator starts again), or None where it can."""
    found = _graph(dataset)
    if found.graph_def is None:
        return "its graph could not be read, to see whether it draws random numbers tf.data does not checkpoint"
    drawn = sorted({node.op for function in found.graph_def.library.function for node in function.node_def
                    if _REDRAWN.match(node.op) and node.op != "RandomIndexShuffle"})
    if not drawn:
        return None
    return (f"its map draws with {', '.join(drawn)} (tf.random's stateful ops), whose state tf.data does not "
            "checkpoint: a new iterator draws again from the seed, so the pass is read from its start. To resume "
            "without reading, draw with tf.random.stateless_* from seeds tf.data checkpoints "
            "(tf.data.Dataset.random(seed=...) zipped in)")


class DatasetFeed:
    """One epoch of `dataset` at a time for Keras's fit, from one iterator whose state is saved at each epoch's start
    and with each checkpoint within an epoch. `says`: this process prints the resume's line; `as_dataset`: each epoch
    given to Keras as a tf.data.Dataset (the TensorFlow backend: _rest_of says why)."""

    what = "tf.data's iterator state"
    UNCOUNTED = ("Received checkpoint_dir with a tf.data.Dataset of unknown or infinite length. Exact resume counts "
                 "the batches of each pass: end the dataset (no .repeat()), or give it its length with "
                 "dataset.apply(tf.data.experimental.assert_cardinality(N_BATCHES)).")  # a subclass: its kind's

    UNCOUNTED_STEPS = (
        "checkpoint_dir: this dataset's passes are of a length TensorFlow does not know (acceltrain made its batches "
        "full with rebatch(drop_remainder=True), or a filter), and, under a tf.distribute strategy, Keras's fit on "
        "such a pass can count optimizer steps it never took at the pass's end (TensorFlow's own: a plain Keras fit "
        "does it too), at random, which Adam's step size follows: the run, resumed or not, is not repeatable bit for "
        "bit. To make it so, batch with drop_remainder=True (dataset.batch(N, drop_remainder=True)), or tell its "
        "length (dataset.apply(tf.data.experimental.assert_cardinality(N_BATCHES)))")

    def __init__(self, dataset, folder: Path, steps_per_epoch: int | None = None, says: bool = True,
                 as_dataset: bool = False):
        # Numbers the steps of a checkpoint: at least the batches of a pass (one more where the last,
        # partial batch is dropped), the same on every run.
        self.counted = self.batches_of(dataset)  # the batches of a pass, where known (None: unknown)
        self.steps_per_epoch = self.counted or steps_per_epoch
        if not self.steps_per_epoch:
            raise UsageError(self.UNCOUNTED)
        self.dataset = dataset
        self.folder = Path(folder)
        self.says = says
        self.as_dataset = as_dataset  # each epoch given to Keras as a tf.data.Dataset, not a generator (_rest_of)
        self.redrawn = self.redrawn_of(dataset)  # why a checkpoint's step is read again on resume (None: it is not)
        self.unsaved = None  # why tf.data cannot save this dataset's iterator (_cannot_save), once found
        self._iterator = None
        self._resumed = False
        self._lock = threading.Lock()  # Keras's TensorFlow trainer reads the pass from a thread of its own
        self._ahead = collections.deque()  # (step, batch): read from the pass, that step not yet begun
        self._read_to = 0  # the step whose batch the pass gives next
        self._restored = []  # the batches read ahead when the checkpoint resumed from was written

    def epoch(self, epoch: int, first_step: int, oldest: tuple = (0, 0)):
        """The batches of `epoch` from `first_step` on (a generator). Epochs are asked for in order; the
        first one asked for is where the run starts or resumes. Saved positions before `oldest` (the oldest
        checkpoint's epoch and step) are deleted, but for that epoch's start."""
        self._iterator = iter(self.dataset)  # this epoch's pass
        self._ahead.clear()
        skip = first_step
        if not self._resumed and (epoch or first_step):
            skip = first_step - self._restore(epoch, first_step)
            if first_step and self.says:
                self._say_resumed(epoch, first_step, skip)
        self._resumed = True
        if first_step == 0:
            self._save(epoch)
        for _ in range(skip):  # the batches of this epoch trained before the stop, read again
            next(self._iterator)
        self._prune(oldest)
        return self._rest_of(first_step)

    @staticmethod
    def batches_of(dataset) -> int | None:
        """The batches of a pass of `dataset`, where known without reading it (a subclass: its kind's count)."""
        return num_batches(dataset)

    @staticmethod
    def redrawn_of(dataset) -> str | None:
        """Why a position within a pass is read again on resume, or None (a subclass: its kind's)."""
        return redrawn_randomness(dataset)

    def _say_resumed(self, epoch: int, step: int, skip: int) -> None:
        at = f"epoch-{epoch:04d}-step-{step:05d}"
        if not skip:
            ahead = f", and the {len(self._restored)} batch(es) Keras had read ahead" if self._restored else ""
            log.info(f"the data resumed where it stood at {at} ({self.what} saved with the checkpoint{ahead}): "
                     "no batch read again")
        else:
            log.info(f"the data read again from epoch-{epoch:04d}'s start to {at}: {skip} batch(es) read and not "
                     f"trained, as {self.redrawn or 'no position was saved at that step'}")

    def _rest_of(self, first_step: int):
        """What Keras's fit reads this epoch from `first_step` on: the batches restored first, then the pass's. Each
        reader reads from `first_step` by position, the batches read already (kept until trained) given again, so
        a reader Keras drops costs the next none: Keras's TensorFlow trainer, under a strategy, reads one batch of
        each fit through an iterator of its own (its _maybe_symbolic_build), whose prefetch reads several, then drops
        it. So on TensorFlow Keras is given a tf.data.Dataset, each iteration a reader of its own: a generator is
        one reader, and what the dropped iterator read of it is lost (Keras 3.15.1 under MirroredStrategy: 6 steps
        for 8 batches, each fit; issue 45)."""
        with self._lock:
            self._ahead.extend(enumerate(self._restored, first_step))
            self._read_to = first_step + len(self._restored)
            self._restored = []
        if not self.as_dataset:
            return self._read_from(first_step)  # what Keras takes: a Python generator (it refuses a tf.data iterator)
        import tensorflow as tf

        signature = self._signature(first_step)
        if signature is None:
            return self._read_from(first_step)  # nothing left in the pass: nothing a dropped reader could lose
        given = tf.data.Dataset.from_generator(lambda: self._read_from(first_step), output_signature=signature)
        # Its length told, where TensorFlow knows the pass's: a pass of unknown length, run to its end under a
        # strategy, can count optimizer steps it never took (UNCOUNTED_STEPS)
        return given if self.counted is None else given.apply(
            tf.data.experimental.assert_cardinality(self.counted - first_step))

    def _read_from(self, step: int):
        """The pass's batches from `step` on (a generator): those read already and kept, then the iterator's next."""
        while True:
            with self._lock:
                kept = self._ahead[0][0] if self._ahead else self._read_to  # the first batch not yet let go
                if step < kept:
                    return  # a reader left behind (one Keras dropped): its batches were trained since
                if step < self._read_to:
                    batch = self._ahead[step - kept][1]
                else:
                    try:
                        batch = self._next(self._read_to)
                    except StopIteration:
                        return
                    self._ahead.append((self._read_to, batch))
                    self._read_to += 1
            step += 1
            yield batch

    def _signature(self, first_step: int):
        """The tf.TypeSpec of a batch, for the tf.data.Dataset Keras is given (None: the pass has no batch left)."""
        return self.dataset.element_spec

    def _next(self, step: int):
        """The pass's batch for `step`, its iterator's next (called under the lock; a subclass notes its position)."""
        return next(self._iterator)

    def trained(self, step: int) -> None:
        """`step` steps of this epoch are done: their batches are no longer kept."""
        with self._lock:
            while self._ahead and self._ahead[0][0] < step:
                self._ahead.popleft()

    def saved_at(self, epoch: int, step: int, oldest: tuple = (0, 0)) -> None:
        """A checkpoint was written at `step` of `epoch`: where the data stands is saved beside it (the iterator's
        state, and the batches read past `step`), unless it must be read again on resume (self.redrawn). Step 0: an
        epoch's end (its next one's start is saved as that epoch begins)."""
        with self._lock:  # the pass stands still while its state is written
            complete = len(self._ahead) >= self._read_to - step and (not self._ahead or self._ahead[0][0] <= step)
            if step and self.redrawn is None and complete:
                self._save(epoch, step)
        self._prune(oldest)

    def _write(self, folder: Path, step: int) -> None:
        import tensorflow as tf

        if self.unsaved is None:
            try:
                tf.train.Checkpoint(iterator=self._iterator).write(str(folder / "position"))
            except tf.errors.FailedPreconditionError as error:
                self._cannot_save(error.message.strip())
        if self.unsaved is not None:  # the pass is read again from its start on resume (_read)
            (folder / UNSAVED).write_text(self.unsaved)
            return
        ahead = [batch for at, batch in self._ahead if at >= step] if step else []
        if ahead:
            read_ahead = tf.data.Dataset.from_tensors(ahead[0])
            for batch in ahead[1:]:
                read_ahead = read_ahead.concatenate(tf.data.Dataset.from_tensors(batch))
            read_ahead.save(str(folder / "read-ahead"))

    def _cannot_save(self, error: str) -> None:
        """tf.data refuses to save an iterator whose pipeline reads state outside it (a Keras preprocessing layer's
        seed variable in a map, a tf.random.Generator): the run goes on as Keras's own fit would, and a resume
        reads the stopped epoch's pass again from a fresh iterator, saying how that differs."""
        stateful = re.search(r"\w+ is stateful", error)  # TensorFlow's own words, without its function's path
        self.unsaved = self.redrawn = (
            f"tf.data cannot save this dataset's iterator ({stateful.group(0) if stateful else error}), so a resume starts the stopped epoch's pass "
            "afresh: its order and random draws can differ from the uninterrupted run's. To resume exactly, draw "
            "random numbers with tf.random.stateless_* from seeds of tf.data.Dataset.random(seed=...) zipped in "
            "(tf.data saves them), or apply the random layers in the model rather than in the dataset's map")
        log.warn(f"checkpoint_dir: {self.unsaved}.")

    def _read(self, folder: Path) -> bool:
        """Where the data stood when `folder` was saved; False where tf.data could not save it (_cannot_save)."""
        import tensorflow as tf

        if (folder / UNSAVED).is_file():  # a fresh pass: the caller reads the trained batches again
            self.redrawn = self.redrawn or (folder / UNSAVED).read_text()
            return False
        tf.train.Checkpoint(iterator=self._iterator).read(str(folder / "position")).assert_consumed()
        if (folder / "read-ahead").is_dir():
            self._restored = list(tf.data.Dataset.load(str(folder / "read-ahead")))
        return True

    def _save(self, epoch: int, step: int = 0) -> None:
        final = self.folder / (f"epoch-{epoch:04d}" + (f"-step-{step:05d}" if step else ""))
        partial = self.folder / f".{final.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        self._write(partial, step)
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)  # atomic: a kill leaves the previous positions whole

    def _restore(self, epoch: int, step: int) -> int:
        """Where the data stood at `step` of `epoch` (saved_at), else at the epoch's start: returns the step restored."""
        at_step = self.folder / f"epoch-{epoch:04d}-step-{step:05d}"
        if step and at_step.is_dir() and self._read(at_step):
            return step
        saved = self.folder / f"epoch-{epoch:04d}"
        if not saved.is_dir():
            raise AcceltrainError(
                f"The checkpoint is at epoch {epoch}, but where the dataset stood at that epoch's start "
                f"({saved}) is missing, so the run cannot resume exactly. Start again without resume.")
        self._read(saved)
        return 0

    def _prune(self, oldest: tuple) -> None:
        """Positions before the oldest checkpoint kept are deleted, but for its epoch's start."""
        if not self.folder.is_dir():
            return
        for path in self.folder.iterdir():
            match = _NAME.match(path.name)
            if not match:
                continue
            position = (int(match.group(1)), int(match.group(2) or 0))
            if position < tuple(oldest) and position != (oldest[0], 0):
                shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def end_of_pass_expected():
    """Keras warns when a generator ends before it knew how many batches it had ("Your input ran out of
    data"): for a pass fed by DatasetFeed, that end is the epoch's, as intended."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        yield
