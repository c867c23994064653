"""Grain's loaders (a DataLoader, a MapDataset or IterDataset): their batch and shard read from their parts, a
process's share rebuilt with Grain's own ShardOptions, the cut of each batch, and the resume position of a fit with
checkpoints (GrainFeed: Grain's checkpointable iterator). Grain is imported inside the functions; none at module level.
"""

import itertools
import re
from pathlib import Path

import numpy as np

from acceltrain.errors import UsageError
from acceltrain.inputs.arrays import batch_rows, places_of_every_nth, read_batches
from acceltrain.inputs.tf_data import DatasetFeed


def shard_options(x):
    """A Grain DataLoader's shard options (None for its datasets, which shard by their own slicing).

    Relies on: grain.DataLoader keeps them as `_shard_options` (Keras's grain adapter reads the same).
    """
    return getattr(x, "_shard_options", None)


def is_loader(x) -> bool:
    """A DataLoader (its checkpointable iterator), not one of Grain's datasets."""
    return hasattr(x, "_data_source")


def batch_size(x) -> int | None:
    """The rows of a loader's batches: its one Batch's (nothing read), else its first batch's where reading it uses
    up nothing (not sharded: a new pass at each iter()); None else."""
    if batch_op(x) is not None:
        return batch_op(x).batch_size * (shard_options(x).shard_count if sharded(x) else 1)
    if not sharded(x):
        for batch in x:  # a new pass: Grain's loaders start over at each iter()
            return batch_rows(batch)
    return None


def sharded(x) -> bool:
    options = shard_options(x)
    return options is not None and options.shard_count > 1


def part(x, cut_batch):
    """The Grain loader with `cut_batch` applied to each batch, as its last operation (a DataLoader rebuilt from its
    own parts, as Keras's grain adapter rebuilds it; a dataset mapped)."""
    import grain

    class Part(grain.transforms.Map):
        def map(self, batch):
            cut = cut_batch(batch)
            if cut is None:
                raise UsageError(f"A batch of {batch_rows(batch)} rows from the Grain loader is smaller than the "
                                 "replicas: batch it with drop_remainder=True, or by more rows.")
            return cut

    if not is_loader(x):
        return x.map(Part())
    options = x._multiprocessing_options
    return grain.DataLoader(data_source=x._data_source, sampler=x._sampler, operations=[*x._operations, Part()],
                            worker_count=options.num_workers, worker_buffer_size=options.per_worker_buffer_size,
                            shard_options=x._shard_options, read_options=x._read_options)


def share(x, index: int, processes: int):
    """An unsharded Grain DataLoader rebuilt to read only this process's records: its IndexSampler and the loader
    given ShardOptions(index, processes, drop_remainder=True) (every process as many records: as many steps), its one
    Batch of batch B given B / processes. None where the loader is not made so.

    Relies on: grain.DataLoader's parts as Keras's grain adapter reads them (`_data_source`, `_sampler`, `_operations`,
    `_multiprocessing_options`, `_read_options`), and IndexSampler's (`_num_records`, `_shuffle`, `_num_epochs`,
    `_seed`), grain 0.2."""
    import grain.python as grain

    batch = batch_op(x)
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


def records_share(x, index: int, processes: int):
    """An unsharded Grain DataLoader rebuilt to read records index, index + processes, ... of its sampler's order, all
    of them (evaluate, predict): its sampler as it is, the loader given ShardOptions(index, processes), which takes
    every processes-th record of the sampler's order (tried here, Grain 0.2: with 11 records and 2 shards it left the
    last out even without drop_remainder, so the records must divide by the processes), its one Batch of B given
    B / processes. None where the loader is not made so. Relies on: the parts `share` names."""
    import grain.python as grain

    batch = batch_op(x)
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


def num_batches(x) -> int | None:
    """The batches of one pass of a Grain DataLoader in this process, counted from its parts without reading it (it
    reads sampler indices shard_index, shard_index + shard_count, ... below the sampler's length); None where its
    sampler is not an IndexSampler of one epoch, or its operations are not one grain.Batch among maps.

    Relies on: the parts `share` names, and IndexSampler's length as Grain 0.2 counts it (its records, less a
    sharded remainder dropped)."""
    import grain.python as grain

    batch = batch_op(x)
    if batch is None or type(x._sampler) is not grain.IndexSampler or x._sampler._num_epochs != 1 \
            or any(isinstance(op, grain.FilterTransform) for op in x._operations):
        return None
    shards = x._shard_options or grain.NoSharding()
    records = max(0, -(-(len(x._sampler) - shards.shard_index) // shards.shard_count))
    return records // batch.batch_size if batch.drop_remainder else -(-records // batch.batch_size)


def batch_op(x):
    """A Grain DataLoader's one grain.Batch operation (None: a dataset, or not one Batch)."""
    import grain.python as grain

    batches = [op for op in getattr(x, "_operations", ()) if isinstance(op, grain.Batch)]
    return batches[0] if len(batches) == 1 and is_loader(x) else None


def batches(x, steps: int | None = None) -> list:
    """A loader's batches (a new pass: its first `steps`), as numpy arrays."""
    return read_batches(iter(x), steps)


def read_by_share(x, index: int, processes: int, replicas: int, shuffle: bool):
    """(this process's share of a training loader, rebuilt with Grain's ShardOptions, and how; or None and why)."""
    shared = share(x, index, processes)
    if shared is None:
        return None, ("Grain shares only a DataLoader with an IndexSampler and one grain.Batch dividing by the "
                      "processes: build it so, or pass shard_options=grain.sharding.ShardByJaxProcess() with a "
                      "Batch of 1/processes of the global batch")
    return shared, (f"rebuilt with Grain's ShardOptions (process p reads shard p of {processes}, as "
                    f"ShardByJaxProcess) and batches of 1/{processes} of the global batch")


def whole_share(x, steps, index: int, processes: int):
    """((this process's batches of the whole read, each row's place), how); (None, why not): an unsharded loader reads
    records p, p + processes, ...; one sharded by process already is its share, joined process by process."""
    if not sharded(x):
        shared = records_share(x, index, processes)
        if shared is None:
            return None, (f"Grain shares only a DataLoader with an IndexSampler of records dividing by {processes} "
                          f"and one grain.Batch dividing by them")
        found = batches(shared, steps)
        return (found, places_of_every_nth(found, index, processes)), (
            f"process p read records p, p + {processes}, ... (Grain's ShardOptions)")
    if shard_options(x).shard_count == processes:
        found = batches(x, steps)
        rows = sum(batch_rows(batch) for batch in found)
        return (found, np.int64(index) * 2**40 + np.arange(rows)), ("a Grain loader sharded by process, joined "
                                                                    "process by process")
    return None, "a Grain loader has no share to take"


class GrainFeed(DatasetFeed):
    """A Grain DataLoader the same way, one pass (a new iter()) an epoch, with Grain's checkpointable iterator: its
    get_state() taken before each batch it gives, and the one before the step a checkpoint is written at saved beside
    it (epoch-E-step-S/position.json), so a resume set_state()s there and reads no batch again. (Keras reads ahead of
    the step it trains: the state is the one taken before that step's batch, not the iterator's latest.)"""

    what = "Grain's iterator state"
    UNCOUNTED = ("Received checkpoint_dir with a Grain DataLoader whose batches a pass cannot be counted without "
                 "reading it. Exact resume counts the batches of each pass: give it an IndexSampler(num_epochs=1, ...) "
                 "and one grain.Batch, and no filter.")
    batches_of = staticmethod(num_batches)  # this module's count: a Grain loader's, not tf.data's

    @staticmethod
    def redrawn_of(loader) -> None:
        """Nothing is read again: Grain's get_state() is the whole position, its random draws' included."""
        return None

    def __init__(self, loader, folder: Path, says: bool = True, as_dataset: bool = False):
        super().__init__(loader, folder, says=says, as_dataset=as_dataset)
        self._before = {}

    def _rest_of(self, first_step: int):
        """As DatasetFeed's, by position (on TensorFlow a tf.data.Dataset: a generator given to Keras under a strategy
        lost the batches its dropped first iterator had read, 8 of 16 trained in 2 epochs of 8 batches; issue 45)."""
        self._before = {first_step: self._iterator.get_state()}  # step → the state before its batch, this epoch
        return super()._rest_of(first_step)

    def _next(self, step: int):
        batch = next(self._iterator)
        self._before[step + 1] = self._iterator.get_state()  # taken now: Keras may save before asking on
        return batch

    def _signature(self, first_step: int):
        """Read from a first batch (Grain's loader has no element_spec): it is kept, and given first."""
        import tensorflow as tf

        for batch in self._read_from(first_step):
            return tf.nest.map_structure(
                lambda a: tf.TensorSpec((None, *np.shape(a)[1:]), tf.as_dtype(np.asarray(a).dtype)), batch)
        return None

    def saved_at(self, epoch: int, step: int, oldest: tuple = (0, 0)) -> None:
        if step and step in self._before:
            self._save(epoch, step)
            self._before = {k: v for k, v in self._before.items() if k >= step}
        self._prune(oldest)

    def _write(self, folder: Path, step: int) -> None:
        (folder / "position.json").write_bytes(self._before[step] if step else self._iterator.get_state())

    def _read(self, folder: Path) -> bool:
        self._iterator.set_state(_same_default_repr((folder / "position.json").read_bytes(),
                                                    repr(self.dataset._data_source)))
        return True


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
