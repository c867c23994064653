"""Streams: the inputs a script passes that are not arrays (a tf.data dataset, a keras.utils.PyDataset, a generator,
Grain's loaders), taken by the arrays' rules batch by batch, each process of a job reading only its share.

inputs.py calls share_stream (fit) and stream_to_arrays (evaluate, predict, a validation stream); `acceltrain run`'s
FitGuard asks stream_batch_size first. numpy only at module level: a stream's own methods are used, and Grain and
Keras are imported inside the functions that wrap a Grain loader or a PyDataset (tf.data's graph in data.py).
"""

import random
import threading
import weakref

import numpy as np

from acceltrain import data
from acceltrain.errors import UsageError


# --- Streams: tf.data, keras.utils.PyDataset, generators, Grain's loaders ------------------------------------
# The arrays' rules, batch by batch (data.batch_part): in fit, a batch that does not divide over the replicas loses
# its last rows (only a pass's last, partial batch has any). In a job of P processes, each process reads only its
# share of the samples, and feeds batch / P rows a step, so the global batch stays the script's:
# - a tf.data pipeline: read at its source (data.source_share): process p's pipeline reads samples p, p + P, ... and
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

def is_stream(x) -> bool:
    return x is not None and not data.is_arrays(x)


def stream_batch_size(x, process_index: int = 0, num_processes: int = 1) -> int | None:
    """The rows of a stream's first batch, where it can be read without using up what fit is about to read (a
    generator's cannot: None). A PyDataset's is the batch this process reads first, kept for that read (_read)."""
    if data.is_dataset(x):
        return data.dataset_batch_size(x)
    if data.is_py_dataset(x) and (x.num_batches or 0) > 0:
        index = process_index if x.num_batches > num_processes else 0  # its first group is not its last
        if _PROBED.get(x, (None,))[0] != index:
            _PROBED[x] = (index, x[index])
        return data.batch_rows(data.tensors_as_numpy(_PROBED[x][1]))
    if data.is_grain(x) and _grain_batch(x) is not None:  # its one Batch's: nothing read
        return _grain_batch(x).batch_size * (_grain_shard_options(x).shard_count if _grain_sharded(x) else 1)
    if data.is_grain(x) and not _grain_sharded(x):
        for batch in x:  # a new pass: Grain's loaders start over at each iter()
            return data.batch_rows(batch)
    return None


_PROBED = weakref.WeakKeyDictionary()  # a PyDataset's batch read by stream_batch_size: (index, batch), read once


def _read(x, index: int):
    """Batch `index` of a PyDataset: the one stream_batch_size read, the first time it is asked for."""
    probed = _PROBED.pop(x, None)
    return probed[1] if probed and probed[0] == index else x[index]


def share_stream(runtime, x, notes: list, name: str = "x", cut: bool = True, shuffle: bool = False):
    """A training stream by the rules above: each batch made to divide over the replicas (`cut`: where it may not
    already), this process's share of it. `shuffle`: fit's, for a PyDataset read by share (it then shuffles its batches
    itself: Keras's shuffle must be turned off, Fit.shuffles_itself). Raises UsageError where no share can be
    taken (said with the fix)."""
    replicas, index, processes = runtime.num_replicas, runtime.process_index, runtime.num_processes
    if runtime.backend_module.SPLITS_UNEVEN_BATCHES and processes == 1:
        replicas = 1  # TensorFlow splits an uneven batch itself
    if replicas == 1 and processes == 1:
        return x
    kind = _kind(x)
    if data.is_grain(x) and _grain_sharded(x):
        count = _grain_shard_options(x).shard_count
        if count != processes:
            raise UsageError(f"Received {name}, a Grain loader sharded {count} ways, in a job of {processes} "
                             f"process(es). Shard it by process: shard_options=grain.sharding.ShardByJaxProcess().")
        return _cut(x, replicas // count, cut, name, kind, notes)  # its share already: cut to the local replicas
    if processes > 1:
        shared, how = _read_by_share(x, index, processes, replicas, shuffle)
        if shared is not None:
            notes.append((f"share:{name}:{kind}", f"{name} ({kind}): {how}, so each sample is read and computed once "
                                                  "an epoch and the metrics are the job's"))
            return _cut(shared, replicas // processes, cut, name, kind, notes)
        notes.append((f"share:{name}:{kind}", f"{name} ({kind}): every process reads every batch whole and feeds its "
                                              f"rows of it (one row in {processes}), so each sample is computed once "
                                              f"and the metrics are the job's; {how}"))
    if replicas > 1 and cut:
        notes.append(_cut_note(name, kind, replicas))
    if data.is_dataset(x):
        return data.dataset_part(x, replicas, index, processes)
    part = lambda batch: data.batch_part(data.tensors_as_numpy(batch), replicas, index, processes)  # noqa: E731
    if data.is_py_dataset(x):
        return _py_dataset_part(x, lambda i: part(_read(x, i)))
    if data.is_grain(x):
        return _grain_part(x, part)
    if data.is_generator(x):
        return (batch for batch in map(part, x) if batch is not None)
    raise UsageError(f"Received {name} of type {type(x).__name__} on {replicas} replicas: acceltrain cannot take a "
                     "share of its batches. Pass numpy arrays, a tf.data.Dataset, a keras.utils.PyDataset, a "
                     "generator or a Grain loader.")


def _read_by_share(x, index: int, processes: int, replicas: int, shuffle: bool):
    """(this process's share of `x`, read by share, and how; or None and why it cannot be)."""
    if data.is_dataset(x):
        shared = data.source_share(x, index, processes)
        if shared is None:
            return None, ("its source is not from_tensor_slices or range, or it has no single batch op of a size "
                          f"dividing by {processes} before a static shape or a filter: to read each sample once, "
                          "build it as from_tensor_slices(...)[.map/.shuffle/...].batch(global batch)")
        return shared, (f"each process's pipeline reads every {_nth(processes)} sample of its source (from its own "
                        f"index) and batches 1/{processes} of the global batch")
    if data.is_py_dataset(x):
        return _py_dataset_share(x, index, processes, replicas, shuffle), (
            f"process p reads whole batches p, p + {processes}, ... (the pass's last group of up to {processes} "
            f"batches: every process) and feeds 1/{processes} of one a step"
            f"{f'; shuffled by groups of {processes} batches' if shuffle else ''}")
    if data.is_grain(x):
        shared = _grain_share(x, index, processes)
        if shared is None:
            return None, ("Grain shares only a DataLoader with an IndexSampler and one grain.Batch dividing by the "
                          "processes: build it so, or pass shard_options=grain.sharding.ShardByJaxProcess() with a "
                          "Batch of 1/processes of the global batch")
        return shared, (f"rebuilt with Grain's ShardOptions (process p reads shard p of {processes}, as "
                        f"ShardByJaxProcess) and batches of 1/{processes} of the global batch")
    return None, ("a generator cannot be read by index: pass a keras.utils.PyDataset to read each batch once"
                  if data.is_generator(x) else f"{type(x).__name__} has no share to take")


def _nth(n: int) -> str:
    return {2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def _cut(x, local_replicas: int, cut: bool, name: str, kind: str, notes: list):
    """This process's share with each batch cut to a multiple of the local replicas (the share's last, partial)."""
    if local_replicas <= 1 or not cut:
        return x
    notes.append(_cut_note(name, kind, local_replicas, " of each process"))
    if data.is_py_dataset(x):
        return x  # _py_dataset_share cut each batch to the replicas before its parts
    if data.is_dataset(x):
        return data.dataset_part(x, local_replicas)
    return _grain_part(x, lambda batch: data.batch_part(data.tensors_as_numpy(batch), local_replicas))


def _cut_note(name: str, kind: str, replicas: int, whose: str = "") -> tuple:
    return (f"cut:{name}:{kind}", f"{name} ({kind}): a batch{whose} that does not divide over {replicas} replicas (a "
                                  f"pass's last) loses its last rows, at most {replicas - 1}, so it does (as arrays' "
                                  "final batch is trimmed)")


def stream_to_arrays(x, steps=None, name: str = "x", notes: list | None = None, runtime=None):
    """A finite stream read whole (its first `steps` batches) as (x, y, sample_weight) arrays. In a job of several
    processes (`runtime`), each process reads its share where it can (_share_rows) and the shares are joined in
    every process (runtime.backend_module.join_shares), in the stream's order; else every process reads it whole."""
    processes = runtime.num_processes if runtime is not None else 1
    shared, how = _share_rows(x, steps, runtime.process_index, processes) if processes > 1 else (None, "")
    arrays = None
    if shared is not None:
        batches, keys = shared
        local = data.batches_to_arrays(batches, name=name)
        if all(np.asarray(leaf).dtype.kind not in "OSU" for leaf in data.leaves([a for a in local if a is not None])):
            arrays = runtime.backend_module.join_shares(local, keys)
        else:  # the same in every process: their streams yield the same dtypes
            how = "its strings are not joined over the job"
    joined = arrays is not None
    if not joined:
        arrays = data.batches_to_arrays(data.stream_batches(x, steps), name=name)
    if notes is not None:
        whose = ""
        if processes > 1:
            whose = (f"; each process read its share ({how}), joined over the job, so each sample was read once"
                     if joined else f"; every process read it whole: {how}")
        notes.append((f"in_memory:{name}", f"{name} ({_kind(x)}): read into memory ({data.num_samples(arrays[0])} "
                                           f"samples), so every batch divides over the replicas with none dropped"
                                           f"{whose}"))
    return arrays


def _share_rows(x, steps, index: int, processes: int):
    """((this process's batches, each row's place in the whole stream), how) of a finite stream read by share, to be
    joined; (None, why not) where it cannot be. Each way reads a share every process computes from what they all
    know alike (a source's length, a PyDataset's batches, a Grain sampler's records), so all of them share or none."""
    if data.is_dataset(x):
        shared = data.source_share(x, index, processes, whole=True)
        if shared is None:
            return None, ("its source is not from_tensor_slices or range of at least as many samples as processes, "
                          f"or it has no single batch op of a size dividing by {processes} before a static shape or a "
                          "filter")
        batches = data.stream_batches(shared, steps)
        return (batches, _every_nth(batches, index, processes)), (
            f"process p read samples p, p + {processes}, ... of its source")
    if data.is_py_dataset(x):
        count = x.num_batches if steps is None else min(steps, x.num_batches or steps)
        if count is None or count < processes:
            return None, f"it has fewer batches than processes ({count}), or no length"
        mine = range(index, count, processes)
        batches = [data.tensors_as_numpy(_read(x, i)) for i in mine]
        keys = [np.int64(i) * 2**32 + np.arange(data.batch_rows(batch)) for i, batch in zip(mine, batches)]
        return (batches, np.concatenate(keys)), f"process p read batches p, p + {processes}, ..."
    if data.is_grain(x) and not _grain_sharded(x):
        shared = _grain_records_share(x, index, processes)
        if shared is None:
            return None, (f"Grain shares only a DataLoader with an IndexSampler of records dividing by {processes} "
                          f"and one grain.Batch dividing by them")
        batches = data.stream_batches(shared, steps)
        return (batches, _every_nth(batches, index, processes)), (
            f"process p read records p, p + {processes}, ... (Grain's ShardOptions)")
    if data.is_grain(x) and _grain_shard_options(x).shard_count == processes:  # its share already: process by process
        batches = data.stream_batches(x, steps)
        rows = sum(data.batch_rows(batch) for batch in batches)
        return (batches, np.int64(index) * 2**40 + np.arange(rows)), ("a Grain loader sharded by process, joined "
                                                                      "process by process")
    return None, ("a generator cannot be read by share" if data.is_generator(x)
                  else f"{_kind(x)} has no share to take")


def _every_nth(batches, index: int, processes: int) -> np.ndarray:
    """The places in the whole stream of the rows of `batches`, read as samples index, index + processes, ..."""
    rows = sum(data.batch_rows(batch) for batch in batches)
    return index + processes * np.arange(rows, dtype=np.int64)


def _kind(x) -> str:
    return ("a tf.data.Dataset" if data.is_dataset(x) else "a keras.utils.PyDataset" if data.is_py_dataset(x)
            else "a Grain loader" if data.is_grain(x) else "a generator" if data.is_generator(x)
            else type(x).__name__)


def _grain_shard_options(x):
    """A Grain DataLoader's shard options (None for its datasets, which shard by their own slicing).

    Relies on: grain.DataLoader keeps them as `_shard_options` (Keras's grain adapter reads the same).
    """
    return getattr(x, "_shard_options", None)


def _grain_sharded(x) -> bool:
    options = _grain_shard_options(x)
    return options is not None and options.shard_count > 1


def _grain_part(x, part):
    """The Grain loader with `part` applied to each batch, as its last operation (a DataLoader rebuilt from its
    own parts, as Keras's grain adapter rebuilds it; a dataset mapped)."""
    import grain

    class Part(grain.transforms.Map):
        def map(self, batch):
            cut = part(batch)
            if cut is None:
                raise UsageError(f"A batch of {data.batch_rows(batch)} rows from the Grain loader is smaller than the "
                                 "replicas: batch it with drop_remainder=True, or by more rows.")
            return cut

    if not hasattr(x, "_data_source"):
        return x.map(Part())
    options = x._multiprocessing_options
    return grain.DataLoader(data_source=x._data_source, sampler=x._sampler, operations=[*x._operations, Part()],
                            worker_count=options.num_workers, worker_buffer_size=options.per_worker_buffer_size,
                            shard_options=x._shard_options, read_options=x._read_options)


def _grain_share(x, index: int, processes: int):
    """An unsharded Grain DataLoader rebuilt to read only this process's records: its IndexSampler and the loader
    given ShardOptions(index, processes, drop_remainder=True) (every process as many records: as many steps), its one
    Batch of batch B given B / processes. None where the loader is not made so.

    Relies on: grain.DataLoader's parts as Keras's grain adapter reads them (`_data_source`, `_sampler`, `_operations`,
    `_multiprocessing_options`, `_read_options`), and IndexSampler's (`_num_records`, `_shuffle`, `_num_epochs`,
    `_seed`), grain 0.2."""
    import grain.python as grain

    batch = _grain_batch(x)
    if batch is None or type(x._sampler) is not grain.IndexSampler or batch.batch_size % processes:
        return None
    shards = grain.ShardOptions(shard_index=index, shard_count=processes, drop_remainder=True)
    sampler = x._sampler
    sampler = grain.IndexSampler(num_records=sampler._num_records, shard_options=shards, shuffle=sampler._shuffle,
                                 num_epochs=sampler._num_epochs, seed=sampler._seed)
    operations = [grain.Batch(batch.batch_size // processes, drop_remainder=batch.drop_remainder,
                              batch_fn=batch.batch_fn) if op is batch else op for op in x._operations]
    options = x._multiprocessing_options
    return grain.DataLoader(data_source=x._data_source, sampler=sampler, operations=operations,
                            worker_count=options.num_workers, worker_buffer_size=options.per_worker_buffer_size,
                            shard_options=shards, read_options=x._read_options)


def _grain_records_share(x, index: int, processes: int):
    """An unsharded Grain DataLoader rebuilt to read records index, index + processes, ... of its sampler's order, all
    of them (evaluate, predict): its sampler as it is, the loader given ShardOptions(index, processes), which takes
    every processes-th record of the sampler's order (tried here, Grain 0.2: with 11 records and 2 shards it left the
    last out even without drop_remainder, so the records must divide by the processes), its one Batch of B given
    B / processes. None where the loader is not made so. Relies on: the parts _grain_share names."""
    import grain.python as grain

    batch = _grain_batch(x)
    if batch is None or type(x._sampler) is not grain.IndexSampler or batch.batch_size % processes \
            or len(x._sampler) % processes:
        return None
    operations = [grain.Batch(batch.batch_size // processes, drop_remainder=batch.drop_remainder,
                              batch_fn=batch.batch_fn) if op is batch else op for op in x._operations]
    options = x._multiprocessing_options
    return grain.DataLoader(data_source=x._data_source, sampler=x._sampler, operations=operations,
                            worker_count=options.num_workers, worker_buffer_size=options.per_worker_buffer_size,
                            shard_options=grain.ShardOptions(shard_index=index, shard_count=processes),
                            read_options=x._read_options)


def grain_num_batches(x) -> int | None:
    """The batches of one pass of a Grain DataLoader in this process, counted from its parts without reading it (it
    reads sampler indices shard_index, shard_index + shard_count, ... below the sampler's length); None where its
    sampler is not an IndexSampler of one epoch, or its operations are not one grain.Batch among maps.

    Relies on: the parts _grain_share names, and IndexSampler's length as Grain 0.2 counts it (its records, less a
    sharded remainder dropped)."""
    import grain.python as grain

    batch = _grain_batch(x)
    if batch is None or type(x._sampler) is not grain.IndexSampler or x._sampler._num_epochs != 1 \
            or any(isinstance(op, grain.FilterTransform) for op in x._operations):
        return None
    shards = x._shard_options or grain.NoSharding()
    records = max(0, -(-(len(x._sampler) - shards.shard_index) // shards.shard_count))
    return records // batch.batch_size if batch.drop_remainder else -(-records // batch.batch_size)


def _grain_batch(x):
    """A Grain DataLoader's one grain.Batch operation (None: a dataset, or not one Batch)."""
    import grain.python as grain

    batches = [op for op in getattr(x, "_operations", ()) if isinstance(op, grain.Batch)]
    return batches[0] if len(batches) == 1 and hasattr(x, "_data_source") else None


def _py_dataset_share(x, index: int, processes: int, replicas: int, shuffle: bool):
    """A keras.utils.PyDataset read by share (see "Streams" above): as many steps as x has batches; step s of group
    g = s // processes reads x's batch g·processes + index once (kept until each of its parts is fed) and feeds part
    q = s % processes of it (data.batch_part: cut to the replicas, rows q, q + processes, ...).

    `shuffle` (fit's, which the caller then turns off for Keras): the groups come in a new order each epoch, drawn
    from Python's `random` as Keras's own shuffle of a PyDataset's batches is (the same in every process: a launched
    job's processes share its seed), each group's steps together, so that its batches are read once and kept
    briefly. Keras's shuffle would scatter a group's steps over the epoch: each batch read again at each step."""
    length = len(x)
    last_group = (length - 1) // processes * processes
    kept, lock, steps = {}, threading.Lock(), []
    read = lambda i: _read(x, i)  # noqa: E731

    def new_epoch():
        kept.clear()
        order = list(range(num_groups(length, processes)))
        if shuffle:
            random.shuffle(order)
        steps[:] = group_steps(length, processes, order)

    def part(position):
        step = steps[position]
        group = step // processes * processes
        if group == last_group:  # the pass's last group: every process reads each batch, keeps its rows
            return data.batch_part(data.tensors_as_numpy(read(step)), replicas, index, processes)
        mine = group + index
        with lock:  # Keras's workers ask for steps in threads; its first fit asks for step 0 twice (a peek)
            if mine not in kept:
                kept[mine] = (data.tensors_as_numpy(read(mine)), set())
            batch, served = kept[mine]
            served.add(step)
            if len(served) == processes:
                del kept[mine]
        return data.batch_part(batch, replicas, step - group, processes)

    new_epoch()
    return _py_dataset_part(x, part, on_epoch_end=new_epoch)


def num_groups(length: int, processes: int) -> int:
    """The groups of `processes` batches of a PyDataset of `length` read by share (the last may be shorter)."""
    return -(-length // processes)


def group_steps(length: int, processes: int, order=None) -> list:
    """A pass's steps, group by group (each group's steps together, in order), the groups in `order` (a permutation
    of range(num_groups); None: in order). With one process, each batch its own group."""
    starts = list(range(0, length, processes))
    starts = starts if order is None else [starts[int(i)] for i in order]
    return [start + q for start in starts for q in range(min(processes, length - start))]


def py_dataset_steps(x, steps):
    """`x` (a PyDataset) serving its batches `steps`, in that order: one epoch of a resumable fit, from the step it
    reached on (training/resumable.py); its epoch's end is x's."""
    steps = list(steps)
    return _py_dataset_part(x, lambda i: x[steps[i]], length=len(steps))


def _py_dataset_part(x, serve, on_epoch_end=None, length=None):
    """A keras.utils.PyDataset of `length` batches (default: x's) serving `serve(index)` (a batch, None where nothing is
    left of it), with x's workers and its epoch ends."""
    import keras

    class Part(keras.utils.PyDataset):
        def __init__(self):
            super().__init__(workers=x.workers, use_multiprocessing=x.use_multiprocessing,
                             max_queue_size=x.max_queue_size)

        def __len__(self):
            return len(x) if length is None else length

        @property
        def num_batches(self):
            return len(self)

        def __getitem__(self, index):
            cut = serve(index)
            if cut is None:
                raise UsageError(f"Batch {index} of the PyDataset has fewer rows than the replicas: serve batches "
                                 "of at least as many rows as replicas.")
            return cut

        def on_epoch_end(self):
            if on_epoch_end:
                on_epoch_end()
            x.on_epoch_end()

    return Part()
