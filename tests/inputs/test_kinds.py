"""inputs/kinds.py: an input's kind asked in one place, in Keras's order, with no framework imported (the classes below
stand for Keras's and Grain's by their names and modules, as kind_of recognises them)."""

import numpy as np
import pytest

from acceltrain.inputs import kinds


def _named(name: str, module: str, **members):
    """An instance of a class called `name` defined in `module`, with `members`."""
    return type(name, (), {"__module__": module, **members})()


class _Dataset:  # tf.data.Dataset's two attributes kind_of looks at
    element_spec = None

    def rebatch(self, size):
        return self


def _generator():
    yield np.zeros((2, 1))


@pytest.mark.parametrize("x, kind", [
    (np.zeros((4, 2)), kinds.ARRAYS),
    ([np.zeros(4), np.ones(4)], kinds.ARRAYS),
    ({"a": np.zeros(4), "b": (np.ones(4),)}, kinds.ARRAYS),
    (_Dataset(), kinds.TF_DATA),
    (_named("PyDataset", "keras.src.trainers.data_adapters.py_dataset_adapter", __getitem__=lambda s, i: i), kinds.PY_DATASET),
    (_named("DataLoader", "grain._src.python.data_loader", __iter__=lambda s: iter(())), kinds.GRAIN),
    (_named("MapDataset", "grain._src.python.dataset.dataset"), kinds.GRAIN),
    (_generator(), kinds.GENERATOR),
    (iter([np.zeros(2)]), kinds.GENERATOR),
    (None, kinds.OTHER),
    ([], kinds.OTHER),  # no arrays in it: Keras says what it takes
    ({"a": np.zeros(4), "b": "text"}, kinds.OTHER),
    (range(3), kinds.OTHER),  # iterable, but no __next__: not a generator
    (_named("PyDataset", "my_own_module"), kinds.OTHER),  # the name alone is not Keras's class
])
def test_each_input_is_one_kind_in_kerass_order(x, kind):
    assert kinds.kind_of(x) == kind


def test_a_subclass_is_its_bases_kind_and_a_dataset_that_iterates_is_still_a_dataset():
    base = type("PyDataset", (), {"__module__": "keras.utils"})
    mine = type("MyBatches", (base,), {"__next__": lambda s: None, "__iter__": lambda s: s})()
    assert kinds.kind_of(mine) == kinds.PY_DATASET  # before generator: its own __next__ does not make it one
    dataset = type("Dataset", (_Dataset,), {"__next__": lambda s: None, "__iter__": lambda s: s})()
    assert kinds.kind_of(dataset) == kinds.TF_DATA


@pytest.mark.parametrize("x, named", [(_Dataset(), "a tf.data.Dataset"), (_generator(), "a generator"),
                                      (range(3), "range")])
def test_a_kind_is_named_in_a_line_the_user_reads(x, named):
    assert kinds.named(x) == named
