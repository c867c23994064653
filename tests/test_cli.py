"""`acceltrain train` and `acceltrain devices`: what a user gets, good input and bad.

Most cases run in this process (8 simulated devices, like `--simulate-devices 8`); a few run as a real
subprocess to show the exit codes and the clean stderr a user sees.
"""

import json
import re
import time

import numpy as np
import pytest

from acceltrain.cli import main
from tests import support


def _train(capsys, *args):
    code = main(["train", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def npz(tmp_path, small_mnist):
    """Write a variant of the small MNIST: npz(x_train=...) replaces arrays; keys=None drops them."""

    def write(name="variant.npz", **replace):
        arrays = dict(np.load(small_mnist))
        for key, value in replace.items():
            if value is None:
                del arrays[key]
            else:
                arrays[key] = value
        path = tmp_path / name
        np.savez(path, **arrays)
        return path

    return write


def _model_file(tmp_path, body):
    path = tmp_path / "models.py"
    path.write_text("import keras\n\n" + body)
    return path


# --- Good input -------------------------------------------------------------------------------

def test_train_writes_outputs_that_reload(tmp_path, small_mnist, capsys):
    out = tmp_path / "run"
    code, stdout, stderr = _train(capsys, "--data", small_mnist, "--epochs", 2, "--batch-size", 240,
                                  "--out", out, "--simulate-devices", 8)
    assert code == 0, stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert f"test accuracy: {metrics['test_accuracy']:.4f}" in stdout
    assert metrics["runtime"]["num_replicas"] == 8
    assert len(metrics["history"]["loss"]) == len(metrics["epoch_seconds"]) == 2
    # The default job holds out the last tenth of the training samples to validate on, and says so first.
    assert len(metrics["history"]["val_loss"]) == len(metrics["history"]["val_accuracy"]) == 2
    said = ("the job: mnist-mlp, 2 epochs of 9 steps at global batch 240; validation: the last 240 of the 2,400 "
            "training samples held out to validate on after each epoch (--validation-split 0.1; 0 trains on all)")
    assert stderr.splitlines()[0] == f"acceltrain: {said}" and metrics["job"] == said.removeprefix("the job: ")
    for field in ("test_loss", "first_epoch_seconds", "samples_per_second"):
        assert metrics[field] > 0
    assert "DataParallel over 8 replicas" in stderr and "global batch 240 = 30 × 8" in stderr

    import keras

    from acceltrain.datasets import load_npz
    from acceltrain.recipes import mnist_mlp

    splits = load_npz(small_mnist)
    x_test, y_test = mnist_mlp.preprocess(splits.x_test, splits.y_test)
    reloaded = keras.saving.load_model(out / "model.keras")
    assert reloaded.evaluate(x_test, y_test, verbose=0, return_dict=True)["accuracy"] == pytest.approx(
        metrics["test_accuracy"], abs=1e-6)
    fresh = mnist_mlp.build_model()
    fresh.load_weights(out / "model.weights.h5")
    np.testing.assert_array_equal(fresh.predict(x_test[:50], verbose=0), reloaded.predict(x_test[:50], verbose=0))
    assert not list(out.glob(".*partial*"))  # no temporary files left


def test_train_a_user_model_compiles_it_for_the_labels(tmp_path, small_mnist, capsys):
    models = _model_file(tmp_path, "def build():\n    return keras.Sequential([keras.Input((28, 28)), "
                                   "keras.layers.Flatten(), keras.layers.Rescaling(1 / 255), keras.layers.Dense(10)])\n")
    code, stdout, stderr = _train(capsys, "--model", f"{models}:build", "--data", small_mnist, "--epochs", 3,
                                  "--batch-size", 240, "--out", tmp_path / "run")
    assert code == 0, stderr
    assert "compiled the model: SparseCategoricalCrossentropy (from logits) (integer labels, 10 outputs)" in stderr
    assert stderr.count("compiled the model:") == 1  # though runtime.build may call the build function again
    assert "Adam 0.001" in stderr
    assert float(stdout.split("test accuracy: ")[1]) > 0.6  # chance is 0.1
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["optimizer"] == "Adam, lr 0.001"


def test_a_compiled_user_model_keeps_its_optimizer_and_says_the_learning_rate_is_not_used(tmp_path, small_mnist,
                                                                                          capsys, monkeypatch):
    from acceltrain import log

    monkeypatch.setattr(log, "_quiet", False)  # -q below sets it for this process: put back after
    models = _model_file(tmp_path, "def build():\n    model = keras.Sequential([keras.Input((28, 28)), "
                                   "keras.layers.Flatten(), keras.layers.Dense(10)])\n"
                                   "    model.compile(keras.optimizers.SGD(0.05), 'sparse_categorical_crossentropy', "
                                   "metrics=['accuracy'])\n    return model\n")
    code, _, stderr = _train(capsys, "-q", "--model", f"{models}:build", "--data", small_mnist, "--epochs", 1,
                             "--batch-size", 240, "--learning-rate", "0.01", "--out", tmp_path / "run")
    assert code == 0, stderr
    assert "warning: --learning-rate 0.01 is not used" in stderr and "(SGD, lr 0.05)" in stderr  # shown under -q
    assert "return the model uncompiled" in stderr
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["optimizer"] == "SGD, lr 0.05"
    from acceltrain.commands import report

    assert "SGD, lr 0.05" in report.title(metrics) and "lr 0.01" not in report.title(metrics)


@pytest.mark.slow  # two trainings, ~25 s: the default set has the same rule in tests/training/test_*checkpoint.py
def test_resuming_with_another_model_exits_2_naming_what_differs_and_keeps_the_checkpoints(tmp_path, small_mnist, capsys):
    """Issue 20, item 13: it said "no checkpoint" (Orbax) and trained the new model from scratch."""
    small = _model_file(tmp_path, "def build(units=16):\n    return keras.Sequential([keras.Input((28, 28)), "
                                  "keras.layers.Flatten(), keras.layers.Dense(units), keras.layers.Dense(10)])\n"
                                  "def wider():\n    return build(32)\n")
    out = tmp_path / "run"
    job = ["--data", small_mnist, "--epochs", 1, "--batch-size", 600, "--out", out]
    assert _train(capsys, "--model", f"{small}:build", *job)[0] == 0
    saved = sorted(p.name for p in (out / "checkpoints").iterdir())
    code, _, stderr = _train(capsys, "--model", f"{small}:wider", *job, "--resume")
    assert code == 2, stderr
    assert re.search(r"was written by a different model: trainable variable \S+/kernel is \(784, 32\) float32 here; "
                     r"the checkpoint's \S+/kernel is \(784, 16\) float32", stderr), stderr
    assert "Traceback" not in stderr and "starting from the beginning" not in stderr
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == saved


@pytest.mark.parametrize("made", [False, True], ids=["missing", "empty"])
def test_train_resume_on_a_missing_or_empty_out_starts_the_run(tmp_path, small_mnist, capsys, made):
    """An engine reruns the same command (issue 35): --resume where nothing was written yet starts the run."""
    out = tmp_path / "run"
    if made:
        out.mkdir()
    code, stdout, stderr = _train(capsys, "--data", small_mnist, "--epochs", 1, "--batch-size", 600, "--out", out,
                                  "--resume")
    assert code == 0, stderr
    assert "starting from the beginning" in stderr and "test accuracy:" in stdout


def test_train_stopped_by_a_notice_exits_42_and_still_says_where_its_time_went(tmp_path, small_mnist, capsys):
    """SIGTERM once the run's first checkpoint is under way (it is training): exit 42, and the ledger's line."""
    import os
    import signal
    import threading

    out = tmp_path / "run"

    def notice_once_training():
        deadline = time.monotonic() + 240
        while not list((out / "checkpoints").glob("epoch-*")) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=notice_once_training, daemon=True).start()
    code, _, stderr = _train(capsys, "--data", small_mnist, "--epochs", 20, "--batch-size", 240, "--checkpoint-every",
                             "2 steps", "--out", out)
    assert code == 42, stderr
    assert "Exit 42: preempted, checkpoint saved, restart me." in stderr
    # The save is booked as preemption, or as checkpoint where the notice landed during a save the cadence made (that
    # save is the agreed one): which, the thread's timing decides; tests/training/test_ledger_watch.py pins the first.
    assert re.search(r"acceltrain: where the [\d.]+ s went: .*(preemption|checkpoint) [\d.]+ s", stderr), stderr[-2000:]


def test_devices_json_describes_the_runtime(capsys):
    assert main(["devices", "--json", "--simulate-devices", "8"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["num_devices"] == 8 and described["backend"] == "jax"


def test_a_real_process_trains_on_one_device_and_exits_0_saying_where_its_time_went(tmp_path, small_mnist, cli):
    started = time.time()
    result = cli("train", "--data", small_mnist, "--epochs", 2, "--batch-size", 600, "--out", tmp_path / "run")
    ended = time.time()  # the process has exited
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("test accuracy: ")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["runtime"]["num_replicas"] == 1
    # The ledger, from the interpreter's start to the exit (issue 31: the outputs and the exit were left out, 16 %
    # of a 1-epoch run): within 5 % of the outside clock at both ends; every part of the default path took time.
    support.check_ledger(metrics["ledger"], started, ended)
    for part in ("compilation", "checkpoint", "evaluation"):
        assert metrics["ledger"]["parts"][part] > 0, metrics["ledger"]["parts"]
    assert metrics["ledger"]["steps"] == 2 * 4 and metrics["ledger"]["checkpoints"] == 2
    assert "acceltrain: where the " in result.stderr.splitlines()[-1]
    assert "## Where the time went" in (tmp_path / "run" / "report.md").read_text()


# --- Bad input: a clear message naming the value and the fix, exit 2, no traceback, nothing written ---

BAD_INPUTS = {
    "validation split of all": (lambda t, npz: ["--validation-split", "1"],
                                r"Received --validation-split 1.0. Expected a fraction of the training samples from 0 "
                                r"up to \(not including\) 1, e.g. 0.1; 0 holds none out."),
    "missing data file": (lambda t, npz: ["--data", t / "nope.npz"], r"'.*nope.npz', which is not a file"),
    "unreadable data file": (lambda t, npz: ["--data", _garbage(t)], r"Could not read data file .*np.savez"),
    "npz without the keys": (lambda t, npz: ["--data", npz(y_test=None, x_test=None)],
                             r"lacks x_test, y_test .*np.savez\(path, x_train"),
    "x and y of different lengths": (lambda t, npz: ["--data", npz(y_train=np.zeros(2399, np.uint8))],
                                     r"x_train has 2400 samples but y_train has 2399"),
    "labels outside the classes": (lambda t, npz: ["--data", npz(y_train=np.full(2400, 12, np.uint8))],
                                   r"class labels from 12 to 12, but the model's output has 10 classes"),
    "NaN in the inputs": (lambda t, npz: ["--data", npz(x_train=_with_nan())], r"x holds 1 NaN or infinite"),
    "model file missing": (lambda t, npz: ["--model", t / "absent.py:build"], r"'.*absent.py' is not a file"),
    "model function missing": (lambda t, npz: ["--model", f"{_model_file(t, 'def other(): pass')}:build"],
                               r"has no function 'build'. Functions there: other"),
    "model spec without function": (lambda t, npz: ["--model", "models.py"], r"Expected FILE.py:FUNCTION"),
    "function returns no model": (lambda t, npz: ["--model", f"{_model_file(t, 'def build(): return 42')}:build"],
                                  r"build\(\) returned int, not a Keras model"),
    "batch not divisible": (lambda t, npz: ["--batch-size", 1001, "--simulate-devices", 8],
                            r"batch_size=1001.*8 replicas.*1000 or 1008"),
    "out under a file": (lambda t, npz: ["--out", _file(t) / "run"], r"is a file, not a folder"),
    "out on a read-only filesystem": (lambda t, npz: ["--out", "/proc/acceltrain-run"], r"is not writable"),
    "unknown backend": (lambda t, npz: ["--backend", "torch"], r"'torch'. Valid: jax, tensorflow"),
    "zero simulated devices": (lambda t, npz: ["--simulate-devices", 0], r"simulate_devices=0.*at least 1"),
    "zero epochs": (lambda t, npz: ["--epochs", 0], r"--epochs 0.*at least 1"),
    "negative seed": (lambda t, npz: ["--seed", -1], r"Received --seed -1\. Expected a whole number from 0 to "
                      r"4294967295 \(2\*\*32 - 1\), e\.g\. --seed 1"),  # numpy's ValueError, a traceback
    "negative learning rate": (lambda t, npz: ["--learning-rate", -1], r"--learning-rate -1.0.*positive"),
    "unknown recipe": (lambda t, npz: ["cifar-resnet"], r"Unknown recipe: 'cifar-resnet'. Valid: mnist-mlp"),
}


def _garbage(tmp_path):
    path = tmp_path / "garbage.npz"
    path.write_bytes(b"not a zip file at all")
    return path


def _with_nan():
    x = np.zeros((2400, 28, 28), np.float32)
    x[5, 3, 3] = np.nan
    return x


def _file(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("")
    return path


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_input(case, tmp_path, npz, capsys):
    make_args, message = BAD_INPUTS[case]
    args = make_args(tmp_path, npz)
    out = tmp_path / "out"
    if "--out" not in args:
        args += ["--out", out]
    code = main(["train", *map(str, args), "--epochs" if "--epochs" not in args else "--seed", "1"])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert "Traceback" not in captured.err
    import re

    assert re.search(message, captured.err), captured.err
    assert not out.exists()  # nothing written


@pytest.mark.parametrize("args, message", [
    (["--batch-size", "1001", "--simulate-devices", "2", "--epochs", "1"], "1000 or 1002"),
    (["--simulate-devices", "-3"], "at least 1"),
])
def test_bad_input_in_a_real_process_exits_2_without_traceback(tmp_path, cli, args, message):
    result = cli("train", *args, "--out", tmp_path / "out")
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_argparse_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--epochs", "many"])
    assert exit_info.value.code == 2
    assert "invalid int value: 'many'" in capsys.readouterr().err


def test_a_diverged_run_exits_1_and_says_why(tmp_path, small_mnist, capsys):
    code, stdout, stderr = _train(capsys, "--data", small_mnist, "--learning-rate", 50, "--epochs", 6,
                                  "--batch-size", 240, "--out", tmp_path / "run")
    assert code == 1
    assert "Training diverged" in stderr and "learning rate too high" in stderr
    assert "test accuracy" not in stdout


@pytest.mark.parametrize("args, message", [
    (["train", "--device-memory", "lots"], r"Received --device-memory 'lots'\. Valid: a positive size such as 128MiB"),
    (["train", "--device-memory=-1GiB"], r"Received --device-memory .-1GiB."),
    (["train", "--distribution", "zero"], r"distribution='zero'\. Valid: auto, data, fsdp, model, none"),
    (["train", "--backend", "tensorflow", "--distribution", "fsdp"], r"tensorflow backend.*--backend jax"),
    (["run", "--device-memory", "0", "SCRIPT"], r"Received --device-memory '0'"),
    (["train", "--backend", "tensorflow", "--distribution", "model"], r"distribution='model' with the tensorflow backend"),
    (["launch", "--processes", "2", "--backend", "tensorflow", "--distribution", "model", "SCRIPT"],
     r"launch --processes 2 with --backend tensorflow\. A job of several processes trains on JAX only"),
])
def test_sharding_inputs_exit_2_naming_the_flag_before_anything_starts(tmp_path, capsys, args, message):
    script = tmp_path / "script.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    args = [str(script) if arg == "SCRIPT" else arg for arg in args]
    if args[0] == "train":
        args += ["--out", str(tmp_path / "out")]
    code = main(args)
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert re.search(message, captured.err), captured.err
    assert "Traceback" not in captured.err and "must not run" not in captured.err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, message", [
    (["run", "--ledger", "DIR", "SCRIPT"], r"Received --ledger '.*a_folder', but it is a folder\. Pass a file path"),
    (["run", "--ledger", "/proc/ledger.json", "SCRIPT"], r"--ledger '/proc/ledger.json', but its folder '/proc' is "
     r"not writable .*\. Pass a file path in a folder you can write to"),
    (["launch", "--processes", "2", "--ledger", "DIR", "SCRIPT"], r"Received --ledger '.*a_folder', but it is a "
     r"folder"),
    (["bench", "--json", "DIR"], r"Received --json '.*a_folder', but it is a folder\. Pass a file path"),
    (["run", "--checkpoint-dir", "/proc/acceltrain-ckpt", "SCRIPT"], r"Received --checkpoint-dir "
     r"'/proc/acceltrain-ckpt', but '/proc' is not writable .*\. Pass a folder you can write to"),
], ids=["run ledger a folder", "run ledger not writable", "launch ledger a folder", "bench json a folder",
        "run checkpoint-dir not writable"])
def test_an_output_path_that_cannot_be_written_exits_2_before_anything_runs(tmp_path, capsys, args, message):
    """These said a traceback at the end of the run (bench's after minutes of timing; --ledger's after the script
    ran), or, for --checkpoint-dir, that its FileNotFoundError was acceltrain's bug: now refused first."""
    script = tmp_path / "script.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    (tmp_path / "a_folder").mkdir()
    code = main([str(script) if arg == "SCRIPT" else str(tmp_path / "a_folder") if arg == "DIR" else arg
                 for arg in args])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert re.search(message, captured.err), captured.err
    assert "Traceback" not in captured.err and "must not run" not in captured.err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a_folder", "script.py"]
    assert not any((tmp_path / "a_folder").iterdir())


@pytest.mark.parametrize("job, plan_job", [
    ([], "mnist-mlp"),
    (["--model", "WIDE:build"], "--model WIDE:build"),
])
def test_a_job_that_fits_nowhere_names_its_plan_line(tmp_path, small_mnist, capsys, job, plan_job):
    from tests.support import SCRIPTS

    wide = str(SCRIPTS / "wide_mlp.py")
    job = [arg.replace("WIDE", wide) for arg in job]
    code, _, stderr = _train(capsys, *job, "--data", small_mnist, "--device-memory", "64KiB", "--simulate-devices", 8,
                             "--batch-size", 64, "--out", tmp_path / "run")
    assert code == 2 and "does not fit even sharded over 8 device(s)" in stderr
    assert (f"`XLA_FLAGS=--xla_force_host_platform_device_count=8 acceltrain plan --target here "
            f"{plan_job.replace('WIDE', wide)} --batch-size 64 --device-memory 64KiB`") in stderr
    assert not (tmp_path / "run").exists()


# --- Every flag of every verb reaches its command ---------------------------------------------------

# The function each verb hands its parsed flags to (imported by the verb when it runs).
COMMANDS = {"devices": "acceltrain.runtime:connect", "train": "acceltrain.commands.train:train_and_evaluate",
            "report": "acceltrain.commands.report:redraw", "doctor": "acceltrain.commands.doctor:run_all",
            "run": "acceltrain.commands.run:run_script", "launch": "acceltrain.commands.launch:launch",
            "bench": "acceltrain.commands.bench:run", "plan": "acceltrain.commands.plan:run"}
# Flags the verb uses itself rather than hand on: how it prints, and the file its settings are read from.
USED_BY_THE_VERB = {"help", "quiet", "verbose", "run", "config", *(f"{verb}:json" for verb in ("devices", "doctor", "bench"))}
# Flags that take another path of the verb: launch --emit's (each reaches an artifact pinned in
# tests/commands/emit/golden/ or checked in test_emit.py) and doctor --artifact (tests/commands/emit/test_emit.py::test_doctor_checks_an_artifact).
USED_BY_THE_VERB |= {*(f"launch:{flag}" for flag in ("emit", "target", "nodes", "image", "compile_cache_dir",
                                                     "max_restarts", "name", "grace_period", "queue",
                                                     "priority_class", "exclusive_topology", "wheel")),
                      "doctor:artifact"}


class _Reached(Exception):
    pass


def _distinctive_flags(parser) -> tuple[list[str], dict]:
    """argv giving every flag and positional of a verb's parser a value of its own, and {dest: value}."""
    import argparse

    argv, positionals, expected = [], [], {}
    for number, action in enumerate(parser._actions):
        if action.dest in USED_BY_THE_VERB or f"{parser.prog.split()[-1]}:{action.dest}" in USED_BY_THE_VERB:
            continue
        if action.nargs == 0 or isinstance(action, argparse.BooleanOptionalAction):  # store_true and --x/--no-x
            value, given = True, []
        elif action.choices:
            value = [choice for choice in action.choices if choice != action.default][-1]
            given = [value]
        elif action.dest == "device_memory":
            value = f"{1000 + number}MiB"  # checked by the verb before it calls the command
            given = [value]
        elif action.dest == "checkpoint_every":
            value = f"{1000 + number} steps"  # checked as the verb makes its acceltrain.Checkpoints
            given = [value]
        elif action.nargs == "...":
            value, given = ["--the-script's-own", str(number)], ["--the-script's-own", str(number)]
        else:
            kind = action.type or str
            value = kind(1000 + number) if kind in (int, float) else f"value-of-{action.dest}"
            given = [str(value)]
        expected[action.dest] = value
        if action.option_strings:
            argv += [action.option_strings[0], *given]  # --tensorboard, not --no-tensorboard
        else:
            positionals += given
    return argv + positionals, expected


def _received(args, kwargs) -> tuple[dict, list]:
    """What a command was called with: {name: value} of its keywords and of any config object, and all values."""
    import argparse
    import dataclasses

    def fields(value) -> dict:  # a group's fields, and those of the groups inside it (Settings.cluster)
        found = {}
        for name, inner in dataclasses.asdict(value).items():
            found.update(inner if isinstance(inner, dict) else {name: inner})
        return found

    named = dict(kwargs)
    for value in (*args, *kwargs.values()):
        if dataclasses.is_dataclass(value):
            named.update(fields(value))
        elif isinstance(value, argparse.Namespace):
            named.update(vars(value))
    return named, [*args, *named.values()]


@pytest.mark.parametrize("verb", sorted(COMMANDS))
def test_every_flag_of_every_verb_reaches_its_command(verb, monkeypatch):
    import importlib

    from acceltrain import cli

    module, name = COMMANDS[verb].split(":")

    def record(*args, **kwargs):
        raise _Reached(args, kwargs)

    monkeypatch.setattr(importlib.import_module(module), name, record)
    [verbs] = [action for action in cli._parser()._actions if action.dest == "==SUPPRESS==" or action.choices]
    argv, expected = _distinctive_flags(verbs.choices[verb])
    args = cli._parser().parse_args([verb, *argv])
    with pytest.raises(_Reached) as reached:
        args.run(args)
    named, values = _received(*reached.value.args)
    lost = [dest for dest, value in expected.items()
            if not (named.get(dest) == value if isinstance(value, bool) else value in values)]
    assert not lost, f"acceltrain {verb}: {lost} parsed but never handed to {COMMANDS[verb]} ({argv})"


def test_autopilot_means_one_thing_in_train_run_and_launch():
    """Issue 36: --autopilot had two help texts, for train and for run; it is one flag with one meaning."""
    from acceltrain import cli

    [verbs] = [action for action in cli._parser()._actions if action.choices]
    helps = {verb: [action.help for action in verbs.choices[verb]._actions if action.dest == "autopilot"]
             for verb in ("train", "run", "launch")}
    assert helps["train"] == helps["run"] == helps["launch"] == [cli.AUTOPILOT_HELP], helps
