"""positive_int: the one check of a whole number ≥ 1, naming a Python argument or a CLI flag as given."""

import numpy as np
import pytest

from acceltrain.errors import UsageError, positive_int


@pytest.mark.parametrize("value", [1, 7, np.int64(3)])
def test_positive_int_passes_whole_numbers_of_at_least_one(value):
    assert positive_int(value, "epochs") == value


@pytest.mark.parametrize("name, value, message", [
    ("keep_checkpoints", 0, "Received keep_checkpoints=0. Expected a whole number of at least 1"),
    ("batch_size", True, "Received batch_size=True."),
    ("simulate_devices", 2.0, "Received simulate_devices=2.0."),
    ("--epochs", -1, "Received --epochs -1. Expected a whole number of at least 1"),
    ("--processes", "2", "Received --processes '2'."),
])
def test_positive_int_names_the_argument_or_the_flag(name, value, message):
    with pytest.raises(UsageError) as raised:
        positive_int(value, name)
    assert str(raised.value).startswith(message)
