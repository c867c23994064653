"""acceltrain.Checkpoints and runtime.Settings: values that check themselves when made and write themselves back
into `acceltrain run`'s flags; a refused value names the Python argument, or the flag under the CLI's face."""

import dataclasses
import re

import pytest

import acceltrain
from acceltrain import Checkpoints
from acceltrain.errors import UsageError, cli_names
from acceltrain.options import Every
from acceltrain.runtime import Settings

# (what is made, the error under Python, the error under the CLI)
REFUSED = [
    (lambda: Checkpoints("ckpt", every="often"), "Received every='often'. Expected 'auto'",
     "Received --checkpoint-every 'often'. Expected 'auto'"),
    (lambda: Checkpoints("ckpt", every="0 steps"), "Received every='0 steps'", "Received --checkpoint-every '0 steps'"),
    (lambda: Checkpoints("ckpt", keep=0), "Received keep=0. Expected a whole number of at least 1",
     "Received --keep-checkpoints 0. Expected a whole number of at least 1"),
    (lambda: Checkpoints("ckpt", keep=True), "Received keep=True", "Received --keep-checkpoints True"),
    (lambda: Checkpoints(None), "Received dir=None. Expected the path of a folder", "Received --checkpoint-dir None"),
    (lambda: Checkpoints("ckpt", resume="yes"), "Received resume='yes'. Expected True", "Received --resume 'yes'"),
    (lambda: Checkpoints.of(None, every="5 steps"), "Received checkpoint_every without checkpoint_dir. Pass "
     "checkpoint_dir too", "Received --checkpoint-every without --checkpoint-dir. Pass --checkpoint-dir DIR too"),
    (lambda: Checkpoints.of("ckpt", keep=0), "Received keep_checkpoints=0", "Received --keep-checkpoints 0"),
    (lambda: Settings(simulate_devices=0).check(), "Received simulate_devices=0", "Received --simulate-devices 0"),
    (lambda: Settings(backend="pytorch").check(), "Received backend='pytorch'. Valid: jax, tensorflow",
     "Received --backend 'pytorch'. Valid: jax, tensorflow"),
    (lambda: Settings().check(backend="tensorflow", processes=2), "Received backend='tensorflow' for a job of 2",
     "Received --backend 'tensorflow' for a job of 2"),
    (lambda: Settings(device_memory="lots").check(), "Received device_memory='lots'", "Received --device-memory 'lots'"),
]


@pytest.mark.parametrize("make, as_python, as_cli", REFUSED, ids=[case[1][:40] for case in REFUSED])
def test_a_refused_value_names_the_argument_under_python_and_the_flag_under_the_cli(make, as_python, as_cli):
    with pytest.raises(UsageError) as refused:
        make()
    assert as_python in str(refused.value) and "--" not in str(refused.value).split(".")[0]
    with pytest.raises(UsageError) as refused, cli_names():
        make()
    assert as_cli in str(refused.value)


def test_the_cli_names_context_ends_with_its_block_also_when_it_raises():
    from acceltrain.errors import option, under_cli

    with pytest.raises(UsageError), cli_names():
        assert under_cli() and option("checkpoint_every") == "--checkpoint-every"
        Checkpoints("ckpt", keep=0)
    assert not under_cli() and option("checkpoint_every") == "checkpoint_every"


def test_checkpoints_are_checked_once_when_made_and_frozen():
    checkpoints = Checkpoints("ckpt", every=" 3 steps ", keep=3)

    assert checkpoints.cadence == Every(3, "steps") and checkpoints.every == "3 steps"
    assert Checkpoints("ckpt").cadence == Every(auto=True) and Checkpoints("ckpt", every="2").cadence == Every(2)
    assert checkpoints == Checkpoints("ckpt", every="3 steps", keep=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        checkpoints.keep = 5
    assert acceltrain.Checkpoints is Checkpoints and "Checkpoints" in acceltrain.__all__


def test_checkpoints_write_themselves_back_as_run_flags_and_parse_back_the_same(tmp_path):
    """What launch hands each process and an emitted job runs: the flags `acceltrain run` parses into the same value."""
    from acceltrain import cli

    for checkpoints in (Checkpoints("ckpt"), Checkpoints("gs://bucket/ckpt", every="200 steps", keep=3, resume=True),
                        Checkpoints(tmp_path / "a b", every="2 epochs")):
        args = cli._parser().parse_args(["run", *checkpoints.as_args(), "train.py"])
        assert cli._checkpoint_flags(args) == checkpoints, checkpoints.as_args()
    assert Checkpoints("gs://bucket/ckpt").as_args() == ["--checkpoint-dir", "gs://bucket/ckpt"]  # a URL as given


def test_settings_write_themselves_back_as_run_flags_and_parse_back_the_same():
    from acceltrain import cli

    for settings in (Settings(), Settings(backend="jax", simulate_devices=2, distribution="fsdp", platform="cpu",
                                          stall_timeout=600.0, device_memory="70GiB", precision="float32"),
                     Settings(cluster=acceltrain.Cluster(tpu="my-tpu"), stall_timeout=0.5)):
        args = cli._parser().parse_args(["run", *settings.as_args(), "train.py"])
        parsed = cli._settings(args)
        assert dataclasses.replace(parsed, cluster=None) == dataclasses.replace(settings, cluster=None)
        assert parsed.tpu == settings.tpu
    assert Settings().as_args() == []  # the defaults left out
    assert Settings(stall_timeout=600.0).as_args() == ["--stall-timeout", "600"]


def test_runtime_fit_takes_one_checkpoints_value_or_its_keywords_not_both():
    from acceltrain.arguments import checkpoints_of

    asked = Checkpoints("ckpt", every="3 steps")
    assert checkpoints_of(asked, None, False, "auto", 2) is asked
    assert checkpoints_of(None, "ckpt", False, "3 steps", 2) == asked
    assert checkpoints_of(None, None, False, "auto", 2) is None
    with pytest.raises(UsageError, match=r"Received checkpoints= and checkpoint_dir, resume\. Pass the one"):
        checkpoints_of(asked, "other", True, "auto", 2)
    with pytest.raises(UsageError, match=r"Received checkpoints='ckpt'\. Expected an acceltrain.Checkpoints"):
        checkpoints_of("ckpt", None, False, "auto", 2)
    with pytest.raises(UsageError, match=r"Received checkpoint_every='often'"):  # the keywords, named as given
        checkpoints_of(None, "ckpt", False, "often", 2)
    with pytest.raises(UsageError, match=r"Received every='often'"):  # the value, named as its own arguments
        Checkpoints("ckpt", every="often")


@pytest.mark.parametrize("where, problem", [
    (lambda tmp: tmp / "a_file", r"which is a file\. Pass a folder"),
    (lambda tmp: tmp / "a_file" / "ckpt", r"is a file, not a folder\. Pass a folder you can write to"),
    (lambda tmp: "/proc/acceltrain-ckpt", r"'/proc' is not writable .*\. Pass a folder you can write to"),
], ids=["a file", "under a file", "not writable"])
def test_runtime_fit_refuses_a_checkpoint_folder_it_cannot_write_before_it_starts(tmp_path, where, problem):
    """Runtime.fit(checkpoint_dir=...) said FileExistsError or FileNotFoundError at its first checkpoint: now refused
    when the fit is called, naming the keyword, or Checkpoints's own argument for the one value; nothing made."""
    from acceltrain.arguments import checkpoints_of

    (tmp_path / "a_file").write_text("")
    folder = where(tmp_path)
    shown = re.escape(repr(str(folder)))
    with pytest.raises(UsageError, match=rf"Received checkpoint_dir={shown}.*{problem}"):
        checkpoints_of(None, folder, False, "auto", 2)
    with pytest.raises(UsageError, match=rf"Received dir={shown}.*{problem}"):
        checkpoints_of(Checkpoints(folder), None, False, "auto", 2)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a_file"]
    assert checkpoints_of(Checkpoints("gs://bucket/ckpt"), None, False, "auto", 2).dir == "gs://bucket/ckpt"


def test_settings_are_read_by_name_from_a_verbs_flags_and_a_train_config():
    """connect()'s keywords spelled out once (Settings.read): every verb's flags and `train`'s config read alike; a
    name that is absent or None keeps its default."""
    import argparse

    from acceltrain import cli
    from acceltrain.commands.config import TrainConfig

    args = cli._parser().parse_args(["devices", "--simulate-devices", "2", "--tpu", "my-tpu", "--precision", "float32"])
    assert Settings.read(args) == Settings(simulate_devices=2, precision="float32",
                                           cluster=acceltrain.Cluster(tpu="my-tpu"))
    config = TrainConfig(backend="jax", distribution="fsdp", stall_timeout=5.0, device_memory="1GiB")
    assert Settings.read(config) == Settings(backend="jax", distribution="fsdp", stall_timeout=5.0,
                                             device_memory="1GiB", cluster=acceltrain.Cluster())
    job = {"coordinator": "10.0.0.1:1234", "num_processes": 2, "process_id": 1}
    assert Settings.read(argparse.Namespace(backend=None), **job) == Settings(cluster=acceltrain.Cluster(**job))


def test_connect_is_called_with_its_keywords_only_by_settings_connect():
    """Every verb reaches connect() through one Settings (train, run, launch, devices, doctor's dry run, bench's
    acceltrain run): no module of src/ but runtime.py calls connect() itself, and runtime.py only in Settings.connect."""
    import ast
    from pathlib import Path

    source = Path(acceltrain.__file__).parent
    callers = []
    for path in sorted(source.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for scope in ast.walk(tree):
            if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(scope):
                    called = node.func if isinstance(node, ast.Call) else None
                    if isinstance(called, ast.Name) and called.id == "connect" or isinstance(called, ast.Attribute) \
                            and called.attr == "connect" and getattr(called.value, "id", None) in ("acceltrain", "runtime"):
                        callers.append(f"{path.relative_to(source)}::{scope.name}")
    assert sorted(set(callers)) == ["runtime.py::connect"], callers
