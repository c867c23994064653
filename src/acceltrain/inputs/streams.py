"""Streams: the inputs a script passes that are not arrays (a tf.data dataset, a keras.utils.PyDataset, a generator,
Grain's loaders), taken by the arrays' rules batch by batch, each process of a job reading only its share; and the
first batches of any input, read ahead without using up what fit is about to read (first_batches).

inputs/__init__.py calls share_stream (fit) and stream_to_arrays (evaluate, predict, a validation stream); `acceltrain
run`'s FitGuard asks stream_batch_size first. Each kind's own rules are in its module (tf_data.py, py_dataset.py,
grain_loaders.py); here they are dispatched on the input's kind. numpy only at module level.
"""

import itertools

import numpy as np

from acceltrain.errors import UsageError
from acceltrain.inputs import arrays, grain_loaders, kinds, py_dataset, tf_data
from acceltrain.inputs.kinds import ARRAYS, GENERATOR, GRAIN, PY_DATASET, TF_DATA, kind_of


# --- Streams: tf.data, keras.utils.PyDataset, generators, Grain's loaders ------------------------------------
# The arrays' rules, batch by batch (arrays.batch_part): in fit, a batch that does not divide over the replicas loses
# its last rows (only a pass's last, partial batch has any). In a job of P processes, each process reads only its
# share of the samples, and feeds batch / P rows a step, so the global batch stays the script's:
# - a tf.data pipeline: read at its source (tf_data.source_share): process p's pipeline reads samples p, p + P, ... and
#   batches batch / P of them; with no shuffle, global batch k is the pipeline's batch k;
# - a PyDataset: by index, in groups of P batches: process p reads batch g·P + p of group g whole and feeds 1/P of it
#   (rows q, q + P, ...) at each of the group's P steps, so global step g·P + q holds rows of each of the group's
#   batches. The group holding the pass's last batch (it may be shorter) is read by every process, which keeps its
#   rows of each batch: the processes' steps must have as many rows;
# - a Grain DataLoader: rebuilt with Grain's own ShardOptions (one shard a process, as ShardByJaxProcess) and its
#   Batch by batch / P; one sharded by process already reads only its share;
# - what cannot be read by share (a generator, a pipeline that does not start at from_tensor_slices or range, a
#   Grain dataset): every process reads every batch whole and keeps its rows (every P-th), so each sample is still
#   computed once; said in one line with the reason.
# evaluate and predict (and a validation stream) read a stream into arrays (in_memory) and take the arrays' rules from
# there; in a job, each process reads its share (a tf.data pipeline's every P-th source sample, a PyDataset's batches
# p, p + P, ..., a Grain loader's shard p) and the shares are joined over the job (the backend's join_shares), each
# row put back at its place in the stream: every process holds the whole set, read once in the job.


# Each stream kind's module: its share for fit (read_by_share), its share of a whole read (whole_share), its batches.
_MODULES = {TF_DATA: tf_data, PY_DATASET: py_dataset, GRAIN: grain_loaders}


def is_stream(x) -> bool:
    return x is not None and kind_of(x) != ARRAYS


def stream_batch_size(x, process_index: int = 0, num_processes: int = 1) -> int | None:
    """The rows of a stream's first batch, where it can be read without using up what fit is about to read (a
    generator's cannot: None). A PyDataset's is the batch this process reads first, kept for that read."""
    kind = kind_of(x)
    if kind == TF_DATA:
        return tf_data.dataset_batch_size(x)
    if kind == PY_DATASET:
        return py_dataset.first_batch_rows(x, process_index, num_processes)
    if kind == GRAIN:
        return grain_loaders.batch_size(x)
    return None


def peeked(x):
    """(x as fit will read it, the rows of its first batch): a generator's first batch read and put back in front (a
    generator of what it had yet to give, as Keras takes one), so its batch is known before fit reads it, as other
    streams' are (stream_batch_size); another stream as it is, with stream_batch_size's answer."""
    if kind_of(x) != GENERATOR:
        return x, stream_batch_size(x)
    try:
        first = next(x)
    except StopIteration:
        return x, None

    def again():
        yield first
        yield from x

    return again(), arrays.batch_rows(kinds.tensors_as_numpy(first))


def share_stream(split, x, notes: list, name: str = "x", cut: bool = True, shuffle: bool = False):
    """A training stream by the rules above: each batch made to divide over the replicas (`cut`: where it may not
    already), this process's share of it. `shuffle`: fit's, for a PyDataset read by share (it then shuffles its batches
    itself: Keras's shuffle must be turned off, Fit.shuffles_itself). Raises UsageError where no share can be
    taken (said with the fix)."""
    replicas, index, processes = split.num_replicas, split.process_index, split.num_processes
    if split.splits_uneven_batches and processes == 1:
        replicas = 1  # TensorFlow splits an uneven batch itself
    if replicas == 1 and processes == 1:
        return x
    kind, named = kind_of(x), kinds.named(x)
    if kind == GRAIN and grain_loaders.sharded(x):
        count = grain_loaders.shard_options(x).shard_count
        if count != processes:
            raise UsageError(f"Received {name}, a Grain loader sharded {count} ways, in a job of {processes} "
                             f"process(es). Shard it by process: shard_options=grain.sharding.ShardByJaxProcess().")
        return _cut(x, replicas // count, cut, name, notes)  # its share already: cut to the local replicas
    if processes > 1:
        shared, how = _read_by_share(x, index, processes, replicas, shuffle)
        if shared is not None:
            notes.append((f"share:{name}:{named}", f"{name} ({named}): {how}, so each sample is read and computed "
                                                   "once an epoch and the metrics are the job's"))
            return _cut(shared, replicas // processes, cut, name, notes)
        notes.append((f"share:{name}:{named}", f"{name} ({named}): every process reads every batch whole and feeds its "
                                               f"rows of it (one row in {processes}), so each sample is computed once "
                                               f"and the metrics are the job's; {how}"))
    if replicas > 1 and cut:
        notes.append(_cut_note(name, named, replicas))
    if kind == TF_DATA:
        return tf_data.dataset_part(x, replicas, index, processes)
    part = lambda batch: arrays.batch_part(kinds.tensors_as_numpy(batch), replicas, index, processes)  # noqa: E731
    if kind == PY_DATASET:
        return py_dataset.serving(x, lambda i: part(py_dataset.read(x, i)))
    if kind == GRAIN:
        return grain_loaders.part(x, part)
    if kind == GENERATOR:
        return (batch for batch in map(part, x) if batch is not None)
    raise UsageError(f"Received {name} of type {type(x).__name__} on {replicas} replicas: acceltrain cannot take a "
                     "share of its batches. Pass numpy arrays, a tf.data.Dataset, a keras.utils.PyDataset, a "
                     "generator or a Grain loader.")


def _read_by_share(x, index: int, processes: int, replicas: int, shuffle: bool):
    """(this process's share of `x`, read by share, and how; or None and why it cannot be): its kind's way."""
    module = _MODULES.get(kind_of(x))
    if module is not None:
        return module.read_by_share(x, index, processes, replicas, shuffle)
    return None, ("a generator cannot be read by index: pass a keras.utils.PyDataset to read each batch once"
                  if kind_of(x) == GENERATOR else f"{type(x).__name__} has no share to take")


def _cut(x, local_replicas: int, cut: bool, name: str, notes: list):
    """This process's share with each batch cut to a multiple of the local replicas (the share's last, partial)."""
    if local_replicas <= 1 or not cut:
        return x
    notes.append(_cut_note(name, kinds.named(x), local_replicas, " of each process"))
    kind = kind_of(x)
    if kind == PY_DATASET:
        return x  # py_dataset.share cut each batch to the replicas before its parts
    if kind == TF_DATA:
        return tf_data.dataset_part(x, local_replicas)
    return grain_loaders.part(x, lambda batch: arrays.batch_part(kinds.tensors_as_numpy(batch), local_replicas))


def _cut_note(name: str, named: str, replicas: int, whose: str = "") -> tuple:
    return (f"cut:{name}:{named}", f"{name} ({named}): a batch{whose} that does not divide over {replicas} replicas (a "
                                   f"pass's last) loses its last rows, at most {replicas - 1}, so it does (as arrays' "
                                   "final batch is trimmed)")


def stream_to_arrays(x, steps=None, name: str = "x", notes: list | None = None, split=None):
    """A finite stream read whole (its first `steps` batches) as (x, y, sample_weight) arrays. In a job of several
    processes (`split`), each process reads its share where it can (_share_rows) and the shares are joined in
    every process (split.join_shares: the backend's), in the stream's order; else every process reads it whole."""
    processes = split.num_processes if split is not None else 1
    shared, how = _share_rows(x, steps, split.process_index, processes) if processes > 1 else (None, "")
    found = None
    if shared is not None:
        batches, keys = shared
        local = arrays.batches_to_arrays(batches, name=name)
        if all(np.asarray(leaf).dtype.kind not in "OSU" for leaf in arrays.leaves([a for a in local if a is not None])):
            found = split.join_shares(local, keys)
        else:  # the same in every process: their streams yield the same dtypes
            how = "its strings are not joined over the job"
    joined = found is not None
    if not joined:
        found = arrays.batches_to_arrays(stream_batches(x, steps), name=name)
    if notes is not None:
        whose = ""
        if processes > 1:
            whose = (f"; each process read its share ({how}), joined over the job, so each sample was read once"
                     if joined else f"; every process read it whole: {how}")
        notes.append((f"in_memory:{name}", f"{name} ({kinds.named(x)}): read into memory "
                                           f"({arrays.num_samples(found[0])} samples), so every batch divides over "
                                           f"the replicas with none dropped{whose}"))
    return found


def _share_rows(x, steps, index: int, processes: int):
    """((this process's batches, each row's place in the whole stream), how) of a finite stream read by share, to be
    joined; (None, why not) where it cannot be: its kind's way. Each way reads a share every process computes from what
    they all know alike (a source's length, a PyDataset's batches, a Grain sampler's records), so all of them share or
    none."""
    module = _MODULES.get(kind_of(x))
    if module is not None:
        return module.whole_share(x, steps, index, processes)
    return None, ("a generator cannot be read by share" if kind_of(x) == GENERATOR
                  else f"{kinds.named(x)} has no share to take")


def stream_batches(x, steps: int | None = None):
    """The batches of a finite stream, in order (at most `steps`): a dataset's, a PyDataset's by index, a
    generator's or a Grain loader's, each a nest of numpy arrays."""
    module = _MODULES.get(kind_of(x))
    return module.batches(x, steps) if module is not None else arrays.read_batches(iter(x), steps)


def first_batches(x, y, batch_size: int | None, count: int):
    """The first `count` batches a fit would train on, in order, as (x, y) of numpy arrays (y None where there is
    none; float64 cast to float32), from the start again where there are fewer; and the batch. From arrays at
    `batch_size`, or the batches of a tf.data or grain dataset (its own batch); fewer samples than a batch are one batch of
    them all, as Keras trains them. None for other inputs (a generator, a PyDataset: reading them would use up the
    batches fit is about to read) and for no samples (fit says what is wrong with them)."""
    kind = kind_of(x)
    if kind == ARRAYS:
        samples = arrays.num_samples(x)
        if samples == 0:
            return None
        batch = min(arrays.keras_batch(batch_size), samples)
        available = samples // batch
        cuts = [slice(i % available * batch, (i % available + 1) * batch) for i in range(count)]
        return [(arrays.as_float32(arrays.take(x, cut)), arrays.take(y, cut)) for cut in cuts], batch
    if kind == TF_DATA:
        elements, what = x.take(count).as_numpy_iterator(), "tf.data.Dataset"
    elif kind == GRAIN and not grain_loaders.is_loader(x) and hasattr(x, "__iter__"):
        # A grain MapDataset/IterDataset (keras_hub's fit makes one of arrays where grain is installed): each iter()
        # starts again from the first batch, so reading ahead uses up none of fit's. A DataLoader is read once only.
        elements, what = itertools.islice(iter(x), count), "grain dataset"
    else:
        return None
    batches = []
    for element in elements:
        xs, ys = (element[0], element[1] if len(element) > 1 else None) if isinstance(element, tuple) else (element,
                                                                                                           None)
        batches.append((arrays.as_float32(xs), ys))
    if not batches:
        raise UsageError(f"x is an empty {what}: there is nothing to train on.")
    return [batches[i % len(batches)] for i in range(count)], len(arrays.leaves(batches[0][0])[0])
