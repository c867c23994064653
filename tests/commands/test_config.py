import json
import tomllib
from dataclasses import replace

import pytest
from tests.support import run_cli, write_small_mnist

from acceltrain.commands import config
from acceltrain.errors import UsageError
from acceltrain.commands.train import TrainConfig


def write(tmp_path, text, name="run.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_file_gives_its_values_and_paths_are_relative_to_its_folder(tmp_path):
    path = write(tmp_path, 'epochs = 3\nlearning_rate = 1\ndata = "data/small.npz"\nmodel = "m.py:build"\n')
    values = config.load(path)
    assert values == {"epochs": 3, "learning_rate": 1.0, "data": str(tmp_path / "data/small.npz"),
                      "model": f"{tmp_path / 'm.py'}:build"}
    assert isinstance(values["learning_rate"], float)  # an integer is a fine number for a float option


def test_flags_override_the_file_and_the_rest_keeps_its_defaults(tmp_path):
    path = write(tmp_path, "epochs = 3\nseed = 4\n")
    resolved = config.resolve(path, {"seed": 7})
    assert resolved == TrainConfig(epochs=3, seed=7)


@pytest.mark.parametrize("text, named", [
    ("epoch = 3\n", "Unknown key 'epoch'"),
    ('epochs = "3"\n', "epochs = \"3\""),
    ("epochs = true\n", "epochs = true"),  # a bool is an int to Python, not to us
    ("epochs = 2.5\n", "epochs = 2.5"),
    ('learning_rate = "fast"\n', "learning_rate"),
    ("tensorboard = 1\n", "tensorboard = 1"),
    ("[epochs]\nx = 1\n", "Received epochs = {'x': 1}"),
])
def test_unknown_keys_and_wrong_types_name_the_key(tmp_path, text, named):
    path = write(tmp_path, text)
    with pytest.raises(UsageError) as raised:
        config.load(path)
    assert named in str(raised.value)
    assert str(path) in str(raised.value)


def test_an_unknown_key_suggests_the_close_one(tmp_path):
    with pytest.raises(UsageError, match="Did you mean 'batch_size'"):
        config.load(write(tmp_path, "batchsize = 128\n"))


def test_bad_toml_and_a_missing_file_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="not valid TOML"):
        config.load(write(tmp_path, "epochs = \n"))
    with pytest.raises(UsageError, match="cannot be read"):
        config.load(tmp_path / "absent.toml")


def test_the_written_file_reads_back_as_the_same_config_except_out(tmp_path):
    original = TrainConfig(recipe="mnist-mlp", data=str(tmp_path / "d \"q\".npz"), epochs=2, batch_size=240,
                           learning_rate=1e-05, out=str(tmp_path / "a"), backend="jax", simulate_devices=8,
                           seed=3, tensorboard=True, resume=True)
    text = config.dumps(original)
    tomllib.loads(text)  # valid TOML, quotes in a path included
    # the run's own folder is not reused: a rerun neither overwrites nor resumes it
    assert config.resolve(write(tmp_path, text), {}) == replace(original, out=None, resume=False)
    assert f"# out = {json.dumps(str(tmp_path / 'a'))}" in text and "# resume = true" in text


def test_cli_rejects_a_bad_config_with_exit_2_naming_the_key(tmp_path):
    result = run_cli("train", "--config", write(tmp_path, "epochs = 2\nlearning_rat = 0.1\n"), timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Unknown key 'learning_rat'" in result.stderr and "Did you mean 'learning_rate'" in result.stderr
    assert "Traceback" not in result.stderr


def test_rerunning_the_saved_config_reproduces_the_run(tmp_path):
    """Train from a file, then from the config.toml it wrote: same settings, same history, on CPU."""
    write_small_mnist(tmp_path / "small.npz")
    first_config = write(tmp_path, 'epochs = 2\nbatch_size = 240\ndata = "small.npz"\nseed = 5\n')
    first = run_cli("train", "--config", first_config, "--out", tmp_path / "a", "--learning-rate", "0.002",
                    timeout=300)
    assert first.returncode == 0, first.stderr
    saved = tomllib.loads((tmp_path / "a" / "config.toml").read_text())
    assert saved["learning_rate"] == 0.002 and saved["seed"] == 5  # the flag over the file is what was run

    again = run_cli("train", "--config", tmp_path / "a" / "config.toml", "--out", tmp_path / "b", timeout=300)
    assert again.returncode == 0, again.stderr
    a, b = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("a", "b"))
    assert b["config"] == {**a["config"], "out": str(tmp_path / "b"), "backend": "jax", "data": str(tmp_path / "small.npz")}
    assert b["history"] == a["history"]
    assert b["test_metrics"] == a["test_metrics"]
    for name in ("report.png", "report.md", "config.toml"):
        assert (tmp_path / "b" / name).is_file()
