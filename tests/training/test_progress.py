import threading

import pytest

from acceltrain.training.progress import FirstStepStatus


def test_the_first_step_line_ends_when_fit_raises_in_that_step(capsys):
    """Keras skips on_train_end when fit raises: the status line (and its thread) must not outlive fit."""
    with pytest.raises(ValueError):
        with FirstStepStatus() as status:
            status.on_train_batch_begin(0)
            raise ValueError("a bad batch")
    assert status.seconds is not None and not status.phase._thread.is_alive()
    assert not any(thread.name.startswith("acceltrain: ") for thread in threading.enumerate())
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        "acceltrain: the first training step, its compile included: failed in ")


def test_the_first_step_is_timed_once():
    status = FirstStepStatus()
    status.on_train_batch_begin(0)
    status.on_train_batch_end(0)
    first = status.seconds
    status.on_train_batch_begin(1)
    status.on_train_batch_end(1)
    status.on_train_end()
    assert status.seconds == first and first is not None
