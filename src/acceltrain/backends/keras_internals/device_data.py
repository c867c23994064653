"""In-memory arrays kept on the devices: Keras's own array adapter, its batches gathered there (backends/jax/resident.py).

Part of backends/keras_internals/: every use of Keras's private code, each with the behaviour it relies on and a test
by name in tests/backends/test_keras_internals.py.
"""

import functools

import numpy as np


# --- In-memory arrays kept on the devices (backends/jax/resident.py) -----------------------------------------------

def arrays_on_devices(x, y, sample_weight, *, batch_size, steps, shuffle, class_weight, place, gather, token,
                      order=None, placed=None, keras_gathers=True):
    """A Keras data adapter over in-memory arrays that keeps them on the devices: `place(inputs)` once, on the packed
    (x, y, sample_weight) with class weights already turned into sample weights, then each batch `gather(placed,
    indices)` there, in Keras's own order and sizes (the same host permutation, the partial last batch). While its
    `tokens` is True it yields `token(indices)` instead of a batch: what a runner of many steps a dispatch pulls.
    `batch_indices()`: an epoch's index arrays in order, drawn as Keras draws them.
    `keras_gathers` False (a job of several processes: Keras joins the processes' local batches itself): the batches
    Keras reads itself come from the host, only the tokens' are gathered on the devices.
    `order` (rows of the arrays, not shuffled further): an epoch that takes those rows in that order, as Keras would
    take the arrays `x[order]`; `placed`: the packed inputs already on the devices (an earlier epoch's `placed`).

    Relies on: data_adapters.get_data_adapter returns a DataAdapter instance as it is; ArrayDataAdapter.__init__
    turns class_weight into sample weights (one output), resolves the batch size (steps: ceil(n / steps), else 32),
    and keeps the packed inputs in `_inputs`, the sample count in `_num_samples`, the batches in `_size` and the
    partial batch's size in `_partial_batch_size` (read by _get_iterator and the public properties); its `_get_iterator(fn, inputs)` draws the epoch's permutation with
    np.random.permutation at the first batch (shuffle=True; "batch": one per batch) and yields
    `tree.map_structure(partial(fn, indices=...), inputs)` per batch (a slice when not shuffled); JAXTrainer reads
    batches through get_jax_iterator.
    """
    adapter = _on_devices_class()(x, y, sample_weight, batch_size, steps, shuffle if order is None else False,
                                  class_weight, place, gather, token, placed)
    adapter.keras_gathers = keras_gathers
    if order is not None:  # the epoch's rows: its sizes as the arrays x[order] would give them
        adapter.order = np.asarray(order, dtype=np.int32)
        adapter._num_samples = len(order)
        adapter._size = -(-len(order) // adapter._batch_size)
        adapter._partial_batch_size = len(order) % adapter._batch_size
    return adapter


@functools.cache
def _on_devices_class():
    from keras import tree
    from keras.src.trainers.data_adapters.array_data_adapter import ArrayDataAdapter

    whole = object()  # one leaf: the index function is called once a batch

    def indices_of(_, indices=None):
        if isinstance(indices, slice):
            return np.arange(indices.start, indices.stop, dtype=np.int32)
        return np.asarray(indices, dtype=np.int32)

    class ArraysOnDevices(ArrayDataAdapter):
        order = None  # the rows an epoch takes, in order (None: all, as Keras orders them)
        # the first batch Keras reads outside acceltrain's steps (a model's symbolic build reads one before any
        # step; an adapter Keras steps through itself, one batch a step, gives its first), and a partial one, come
        # from the host: gathered on the devices, each would compile one more program
        first_on_host = True
        keras_gathers = True  # False: every batch Keras reads itself comes from the host

        def __init__(self, x, y, sample_weight, batch_size, steps, shuffle, class_weight, place, gather, token,
                     placed):
            super().__init__(x, y=y, sample_weight=sample_weight, batch_size=batch_size, steps=steps,
                             shuffle=shuffle, class_weight=class_weight)
            self.placed = place(self._inputs) if placed is None else placed
            self._gather, self._token, self.tokens = gather, token, False

        def batch_indices(self):
            batches = self._get_iterator(indices_of, whole)
            return batches if self.order is None else (self.order[indices] for indices in batches)

        def get_jax_iterator(self):
            for indices in self.batch_indices():
                if self.tokens:
                    yield self._token(indices)
                elif self.first_on_host or len(indices) != self._batch_size or not self.keras_gathers:
                    self.first_on_host = False
                    yield self.on_host(indices)
                else:
                    yield self._gather(self.placed, indices)

        def on_host(self, indices):
            """A batch sliced on the host, as Keras's own adapter slices it."""
            return tree.map_structure(lambda array: None if array is None else np.asarray(array)[indices],
                                      self._inputs)

    return ArraysOnDevices


def keras_scans_steps() -> bool:
    """Whether this Keras runs steps_per_execution on JAX as its own scan over stacked batches (keras-nightly 3.16:
    keras-team/keras#23527): acceltrain's own device data and steps a dispatch then step aside.

    Relies on: that Keras's DataAdapter.get_jax_iterator takes `super_batch`; 3.15's takes nothing.
    """
    import inspect

    from keras.src.trainers.data_adapters.data_adapter import DataAdapter

    return "super_batch" in inspect.signature(DataAdapter.get_jax_iterator).parameters
