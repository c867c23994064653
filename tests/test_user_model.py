"""--model FILE.py:FUNCTION whose function raises: the user's own frames, one `acceltrain: error:` line naming
the function, exit 2; for `train` and `plan` alike (in this process, through the CLI's main)."""

import re
from pathlib import Path

import pytest

import acceltrain
from acceltrain.cli import main

RAISES = '''import keras


def build():
    return _layers(-3)


def _layers(units):
    raise ValueError(f"no layer of {units} units")
'''


def _frames(stderr: str) -> list[tuple[Path, str]]:
    """(file, function) of each frame of the traceback printed."""
    return [(Path(file).resolve(), function)
            for file, function in re.findall(r'^  File "(.+)", line \d+, in (\S+)$', stderr, flags=re.M)]


@pytest.mark.parametrize("verb", [["train", "--epochs", "1"], ["plan", "--target", "here", "--device-memory", "1GiB"]],
                         ids=["train", "plan"])
def test_a_model_function_that_raises_shows_its_own_frames_and_one_error_line(verb, tmp_path, capsys, runtime):
    models = tmp_path / "models.py"
    models.write_text(RAISES)
    out = ["--out", str(tmp_path / "out")] if verb[0] == "train" else []

    code = main([*verb, "--model", f"{models}:build", *out])
    err = capsys.readouterr().err

    assert code == 2, err
    package = Path(acceltrain.__file__).resolve().parent
    frames = _frames(err)
    assert frames[:2] == [(models.resolve(), "build"), (models.resolve(), "_layers")], err  # the user's, first
    assert not [file for file, _ in frames if file.is_relative_to(package)], err  # none of acceltrain's
    assert "ValueError: no layer of -3 units" in err
    errors = [line for line in err.splitlines() if line.startswith("acceltrain: error:")]
    assert errors == [f"acceltrain: error: --model {models}:build: build() raised ValueError: no layer of -3 units "
                      "(its traceback is above). Fix the function so it returns a keras.Model."], err
    assert not (tmp_path / "out").exists()
