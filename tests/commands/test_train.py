"""`acceltrain train`'s own computations (the whole command runs in tests/test_cli.py)."""

import pytest

from acceltrain.commands.train import throughput


@pytest.mark.parametrize("timed, expected", [
    # A run of 3 epochs of 10 steps: the first compiles, the others are timed.
    ([{"epoch": 1, "seconds": 5.0, "steps": 10}, {"epoch": 2, "seconds": 1.0, "steps": 10},
      {"epoch": 3, "seconds": 1.0, "steps": 10}], (100.0, [2, 3], False)),
    # Resumed at step 7 of epoch 2: this process ran 3 steps of it (with its compile), then epoch 3.
    # Counting epoch 2 whole, or epoch 1 from the earlier process, overstated it.
    ([{"epoch": 2, "seconds": 4.0, "steps": 3}, {"epoch": 3, "seconds": 1.0, "steps": 10}], (100.0, [3], False)),
    # Resumed into the last epoch: only that part was timed here, compile and all, and that is said.
    ([{"epoch": 3, "seconds": 4.0, "steps": 4}], (10.0, [3], True)),
])
def test_throughput_comes_from_the_steps_this_process_ran_after_its_first_epoch(timed, expected):
    got = throughput(timed, batch_size=10)
    assert (got["samples_per_second"], got["samples_per_second_epochs"],
            got["samples_per_second_includes_compile"]) == expected
