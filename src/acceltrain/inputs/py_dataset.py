"""keras.utils.PyDataset: its first batch read once (probe), its share read by groups of batches in a job of several
processes, and one epoch served from a step on (resume by index). Keras is imported inside the function that makes
a PyDataset; numpy only at module level.
"""

import random
import threading
import weakref

import numpy as np

from acceltrain.errors import UsageError
from acceltrain.inputs.arrays import batch_part, batch_rows, read_batches
from acceltrain.inputs.kinds import tensors_as_numpy


_PROBED = weakref.WeakKeyDictionary()  # a batch read by first_batch_rows: (index, batch), read once


def read(x, index: int):
    """Batch `index` of a PyDataset: the one first_batch_rows read, the first time it is asked for."""
    probed = _PROBED.pop(x, None)
    return probed[1] if probed and probed[0] == index else x[index]


def share(x, index: int, processes: int, replicas: int, shuffle: bool):
    """A keras.utils.PyDataset read by share (see streams.py's rules): as many steps as x has batches; step s of group
    g = s // processes reads x's batch g·processes + index once (kept until each of its parts is fed) and feeds part
    q = s % processes of it (batch_part: cut to the replicas, rows q, q + processes, ...).

    `shuffle` (fit's, which the caller then turns off for Keras): the groups come in a new order each epoch, drawn
    from Python's `random` as Keras's own shuffle of a PyDataset's batches is (the same in every process: a launched
    job's processes share its seed), each group's steps together, so that its batches are read once and kept
    briefly. Keras's shuffle would scatter a group's steps over the epoch: each batch read again at each step."""
    length = len(x)
    last_group = (length - 1) // processes * processes
    kept, lock, steps = {}, threading.Lock(), []
    batch_at = lambda i: read(x, i)  # noqa: E731

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
            return batch_part(tensors_as_numpy(batch_at(step)), replicas, index, processes)
        mine = group + index
        with lock:  # Keras's workers ask for steps in threads; its first fit asks for step 0 twice (a peek)
            if mine not in kept:
                kept[mine] = (tensors_as_numpy(batch_at(mine)), set())
            batch, served = kept[mine]
            served.add(step)
            if len(served) == processes:
                del kept[mine]
        return batch_part(batch, replicas, step - group, processes)

    new_epoch()
    return serving(x, part, on_epoch_end=new_epoch)


def num_groups(length: int, processes: int) -> int:
    """The groups of `processes` batches of a PyDataset of `length` read by share (the last may be shorter)."""
    return -(-length // processes)


def group_steps(length: int, processes: int, order=None) -> list:
    """A pass's steps, group by group (each group's steps together, in order), the groups in `order` (a permutation
    of range(num_groups); None: in order). With one process, each batch its own group."""
    starts = list(range(0, length, processes))
    starts = starts if order is None else [starts[int(i)] for i in order]
    return [start + q for start in starts for q in range(min(processes, length - start))]


def steps_from(x, steps):
    """`x` (a PyDataset) serving its batches `steps`, in that order: one epoch of a resumable fit, from the step it
    reached on (training/resumable.py); its epoch's end is x's."""
    steps = list(steps)
    return serving(x, lambda i: x[steps[i]], length=len(steps))


def serving(x, serve, on_epoch_end=None, length=None):
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


def first_batch_rows(x, index: int, processes: int) -> int | None:
    """The rows of the batch this process reads first (None: no batches), kept for that read (`read`)."""
    if (x.num_batches or 0) <= 0:
        return None
    index = index if x.num_batches > processes else 0  # its first group is not its last
    if _PROBED.get(x, (None,))[0] != index:
        _PROBED[x] = (index, x[index])
    return batch_rows(tensors_as_numpy(_PROBED[x][1]))


def batches(x, steps: int | None = None) -> list:
    """A PyDataset's batches by index (its first `steps`), as numpy arrays."""
    count = x.num_batches if steps is None else min(steps, x.num_batches or steps)
    if count is None:
        raise UsageError("Received a PyDataset of unknown length without steps: pass steps=.")
    return read_batches((x[i] for i in range(count)), steps)


def read_by_share(x, index: int, processes: int, replicas: int, shuffle: bool):
    """(this process's share of a training PyDataset, read by groups of batches, and how)."""
    return share(x, index, processes, replicas, shuffle), (
        f"process p reads whole batches p, p + {processes}, ... (the pass's last group of up to {processes} "
        f"batches: every process) and feeds 1/{processes} of one a step"
        f"{f'; shuffled by groups of {processes} batches' if shuffle else ''}")


def whole_share(x, steps, index: int, processes: int):
    """((this process's batches of the whole read: p, p + processes, ...; each row's place), how); (None, why not)."""
    count = x.num_batches if steps is None else min(steps, x.num_batches or steps)
    if count is None or count < processes:
        return None, f"it has fewer batches than processes ({count}), or no length"
    mine = range(index, count, processes)
    found = [tensors_as_numpy(read(x, i)) for i in mine]
    keys = [np.int64(i) * 2**32 + np.arange(batch_rows(batch)) for i, batch in zip(mine, found)]
    return (found, np.concatenate(keys)), f"process p read batches p, p + {processes}, ..."
