import importlib.util
import sys

import pytest
from tests.support import run_cli, write_small_mnist

from acceltrain.training import tensorboard_logs
from acceltrain.errors import AcceltrainError


@pytest.mark.parametrize("missing", ["tensorflow", "tensorboard"])
def test_a_missing_writer_is_named_with_what_to_install(monkeypatch, missing):
    monkeypatch.setitem(sys.modules, missing, None)  # how an install without it looks to the import system
    with pytest.raises(AcceltrainError, match=f"{missing} is not installed.*pip install {tensorboard_logs._PIP[missing]}"):
        tensorboard_logs.check_available()


@pytest.mark.skipif(not all(importlib.util.find_spec(name) for name in ("tensorflow", "tensorboard")),
                    reason="--tensorboard needs tensorflow and tensorboard (the dev extra installs both)")
def test_train_with_tensorboard_writes_event_files(tmp_path):
    data = write_small_mnist(tmp_path / "small.npz", train=1200, test=300)
    result = run_cli("train", "--data", data, "--epochs", 1, "--batch-size", 300, "--tensorboard",
                     "--out", tmp_path / "run", timeout=300)
    assert result.returncode == 0, result.stderr
    events = list((tmp_path / "run" / "tensorboard" / "train").glob("events.out.tfevents.*"))
    assert len(events) == 1
    assert {"epoch_loss", "epoch_accuracy"} <= scalar_tags(events[0])


def scalar_tags(path) -> set[str]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    return {value.tag for event in EventFileLoader(str(path)).Load() for value in event.summary.value}
