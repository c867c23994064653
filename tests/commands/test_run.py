"""`acceltrain run SCRIPT.py`: plain scripts, unchanged, on 8 simulated devices (each test a fresh process)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests import support

MNIST = __import__("acceltrain.datasets", fromlist=["MNIST_PATH"]).MNIST_PATH
SMALL_MNIST = [MNIST, "--train-samples", "4000", "--epochs", "2"]


@pytest.mark.multi_device
def test_plain_script_trains_on_8_replicas_to_its_plain_accuracy(tmp_path):
    plain = support.python(support.EXAMPLES / "plain_mnist.py", *SMALL_MNIST, timeout=300, KERAS_BACKEND="jax")
    assert plain.returncode == 0, plain.stderr

    started = time.time()
    run = support.run_cli("run", "--simulate-devices", "8", "--ledger", tmp_path / "ledger.json",
                          support.EXAMPLES / "plain_mnist.py", *SMALL_MNIST, timeout=300)

    assert run.returncode == 0, run.stderr
    banners = [line for line in run.stderr.splitlines() if "→" in line]
    assert len(banners) == 1 and "8 × cpu (simulated) → DataParallel over 8 replicas" in banners[0]
    # Placement, read from the script's own model at its fit: the kernel spans all 8 devices.
    assert "fit: global batch 256 = 32 × 8 replica(s); the model's variables span 8 devices" in run.stderr
    assert "warning" not in run.stderr  # a clean script gets no advice
    # Same seed, same global batch: the same training, up to the order of float sums.
    assert abs(support.accuracy(run.stdout) - support.accuracy(plain.stdout)) < 0.01
    assert support.accuracy(run.stdout) > 0.85
    # Where the run's time went, from the process's start: the parts sum to the wall, within 5 % of a clock outside.
    saved = json.loads((tmp_path / "ledger.json").read_text())
    support.check_ledger(saved, started)
    assert saved["parts"]["host_syncs"] > 0 and saved["parts"]["evaluation"] > 0, saved["parts"]  # one step at a time
    assert "acceltrain: where the " in run.stderr


@pytest.mark.tensorflow
def test_plain_script_runs_under_mirrored_strategy_on_tensorflow():
    plain = support.python(support.EXAMPLES / "plain_mnist.py", *SMALL_MNIST, timeout=300, KERAS_BACKEND="tensorflow")
    assert plain.returncode == 0, plain.stderr

    run = support.run_cli("run", "--backend", "tensorflow", "--simulate-devices", "2",
                          support.EXAMPLES / "plain_mnist.py", *SMALL_MNIST, timeout=300)

    assert run.returncode == 0, run.stderr
    assert "2 × cpu (simulated) → MirroredStrategy over 2 replicas" in run.stderr
    assert "fit: global batch 256 = 128 × 2 replica(s); the model's variables span 2 devices" in run.stderr
    assert abs(support.accuracy(run.stdout) - support.accuracy(plain.stdout)) < 0.02


@pytest.mark.tensorflow
def test_a_tensorflow_script_that_clears_its_session_keeps_the_strategy_for_the_models_after():
    # Issue 45: clear_session() resets TensorFlow's default graph, and a strategy's scope entered around the script
    # with it: the models after it were built undistributed, and leaving the scope raised "pop from empty list".
    run = support.run_cli("run", "--simulate-devices", "2", support.SCRIPTS / "clears_session.py", timeout=300)

    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines() == ["before: MirroredStrategy 2", "after clear_session: MirroredStrategy 2",
                                       "after utils.clear_session: MirroredStrategy 2"], run.stdout


def _fed_batches(*args, devices: int | None = None, tmp_path=None) -> dict:
    """tests/scripts/fed_batches.py on TensorFlow: plainly, or under `run` over `devices` (with --checkpoint-dir
    every 3 steps where tmp_path is given). Its JSON line: each kind's batches trained an epoch, optimizer steps."""
    script = support.SCRIPTS / "fed_batches.py"
    if devices is None:
        done = support.python(script, *args, timeout=300, KERAS_BACKEND="tensorflow")
    else:
        saving = ["--checkpoint-dir", tmp_path / "checkpoints", "--checkpoint-every", "3 steps"] if tmp_path else []
        done = support.run_cli("run", "--backend", "tensorflow", "--simulate-devices", str(devices), *saving, script,
                               *args, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.tensorflow
@pytest.mark.parametrize("devices", [1, 2])
def test_on_tensorflow_a_generator_a_py_dataset_and_a_grain_loader_train_every_batch_they_give(tmp_path, devices):
    """Issue 45: Keras's TensorFlow trainer, under a strategy, reads one batch of each fit through an iterator it then
    drops, and what that iterator read of a generator is lost (plain Keras under MirroredStrategy: 6 steps for 8
    batches). Under `run` (the script's model in acceltrain's MirroredStrategy), a generator, a PyDataset and a Grain
    DataLoader of 8 batches train 8 an epoch, Adam + accuracy, as the plain one-device run does; with --checkpoint-dir
    (every 3 steps; not a generator, which it refuses) the optimizer counts 16 steps for 16 batches (a Grain loader
    given to Keras as a generator trained 8 of 16 at 2 devices, its optimizer counting 10). Without checkpoints, the
    optimizer's count is the plain run's: Keras's own on Grain is 18 for 16 batches, at 1 device too."""
    plain = _fed_batches("generator", "pydataset", "grain")
    assert all(found["trained"] == [8, 8] for found in plain.values()), plain
    assert _fed_batches("generator", "pydataset", "grain", devices=devices) == plain
    saved = _fed_batches("pydataset", "grain", devices=devices, tmp_path=tmp_path)
    assert saved == {kind: {"trained": [8, 8], "optimizer_steps": 16} for kind in ("pydataset", "grain")}, saved


@pytest.mark.tensorflow
@pytest.mark.parametrize("devices", [1, 4])
def test_a_tensorflow_script_runs_as_written_but_for_what_keras_makes_in_the_strategys_scope(devices):
    """Issue 45: the whole script ran inside the strategy's scope, so its own tf.Variable was mirrored and
    tf.distribute.get_strategy() answered acceltrain's strategy. Now only Keras's objects are the strategy's: the shapes
    (a Sequential with Adam and accuracy on a tf.data pipeline made before it, its own train_step, its own variable
    counted from a callback, evaluate/predict/save/load and an inference model after fit) print what the plain run
    prints at 1 device, and at 4 what the same script prints made in its own MirroredStrategy's scope by hand."""
    script = support.SCRIPTS / "tf_scope_shapes.py"
    plain = support.python(script, timeout=300, **({"OWN_MIRRORED": "4"} if devices > 1 else {}))
    assert plain.returncode == 0, plain.stderr[-3000:]

    run = support.run_cli("run", "--backend", "tensorflow", "--simulate-devices", str(devices), script, timeout=400)

    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout == plain.stdout
    lines = dict(line.split(": ", 1) for line in run.stdout.splitlines())
    assert lines["own variable"] == "ResourceVariable"
    assert lines["strategy outside fit"] == "_DefaultDistributionStrategy"
    assert lines["own variable after fit"] == "24"  # 8 steps × 3 epochs, counted by the script's callback
    assert lines["strategy in a callback"] == "_DefaultDistributionStrategy"
    assert lines["model variable"] == ("MirroredVariable" if devices > 1 else "ResourceVariable")
    assert ("the rest runs outside it, as written" in run.stderr) == (devices > 1)


@pytest.mark.tensorflow
def test_a_tensorflow_scripts_checkpointed_fits_run_outside_the_strategys_scope_too(tmp_path):
    """Issue 45: with --checkpoint-dir the runtime's own loop trained the script's fits inside the whole strategy's
    scope, where without checkpoints only Keras's objects are made in it: the script's callback saw acceltrain's
    MirroredStrategy in force. Now it sees TensorFlow's default strategy, as plainly and as without checkpoints; the
    models are still mirrored over the 4 replicas (the same shapes: a Sequential with Adam and accuracy on tf.data, a
    callback updating the script's own variable, its own train_step, evaluate/predict/save after fit). The metrics
    differ from a plain run's by design (each epoch's order drawn from the seed: run_checkpoints.py). (The callback
    hears 12 batch ends where a plain fit's hears 24, before this change too: not asserted here.)"""
    script = support.SCRIPTS / "tf_scope_shapes.py"
    run = support.run_cli("run", "--backend", "tensorflow", "--simulate-devices", "4", "--checkpoint-dir",
                          tmp_path / "ckpt", script, timeout=400)

    assert run.returncode == 0, run.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in run.stdout.splitlines())
    assert lines["strategy in a callback"] == lines["strategy outside fit"] == "_DefaultDistributionStrategy"
    assert lines["own variable"] == "ResourceVariable" and lines["model variable"] == "MirroredVariable"
    assert int(lines["own variable after fit"]) > 0  # the script's callback updated its own variable, outside the scope
    assert (tmp_path / "ckpt" / "fit-1").is_dir() and (tmp_path / "ckpt" / "fit-2").is_dir()


@pytest.mark.tensorflow
def test_a_tensorflow_scripts_own_strategy_is_named_as_where_its_calls_ran():
    """Issue 45: a TensorFlow script that makes its models in its own MirroredStrategy's scope keeps that strategy
    under run, but the closing line counted its calls as run on acceltrain's "MirroredStrategy over 4 replica(s)", the
    batch line split its batch over 4 replicas, and its predict with a batch of 50 (which divides over its 2) was
    refused. Now each line names its strategy and its split (a Sequential with Adam, accuracy and a callback on
    arrays, then evaluate and predict; a model with its own train_step on tf.data), and it prints what it prints
    plainly."""
    script = support.SCRIPTS / "tf_own_strategy.py"
    plain = support.python(script, timeout=300)
    assert plain.returncode == 0, plain.stderr[-3000:]

    run = support.run_cli("run", "--backend", "tensorflow", "--simulate-devices", "4", script, timeout=400)

    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout == plain.stdout
    own = "the script's own MirroredStrategy (devices CPU:0, CPU:1)"
    assert f"acceltrain: fit: global batch 64 = 32 × 2 replica(s) of {own}" in run.stderr
    said = [line for line in run.stderr.splitlines() if line.startswith("acceltrain: run: the script's Keras calls")]
    assert said == [f"acceltrain: run: the script's Keras calls (2 fit, 1 evaluate, 1 predict) ran on {own}"]
    assert "ran on MirroredStrategy" not in run.stderr and "4 replica(s)" not in run.stderr


@pytest.mark.multi_device
def test_a_script_that_connects_and_closes_itself_keeps_the_runtime_run_holds():
    """connect() with run's options gives the script run's runtime back; the script's close() gives back its own hold
    only, so its fit after it still passes run's layers and is distributed as run's flags say."""
    run = support.run_cli("run", "--simulate-devices", "2", support.SCRIPTS / "closes_runs_runtime.py", timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "(given back: connect() opened this runtime earlier in this process with the same options" in run.stderr
    assert "runtime.close(): this runtime is acceltrain run's, given back to the script's connect()" in run.stderr
    assert "replicas: 2" in run.stdout
    assert "acceltrain: run: the script's Keras calls (1 fit) ran on DataParallel over 2 replica(s)" in run.stderr


def test_each_fit_warning_fires_once_on_its_own_pitfall():
    cases = ["partial_epoch", "partial_epoch", "float64", "float64", "small_batch", "small_batch"]
    run = support.run_cli("run", "--simulate-devices", "8", support.SCRIPTS / "pitfalls.py", *cases, timeout=180)

    assert run.returncode == 0, run.stderr
    segments, case = dict.fromkeys(cases, ""), None  # stderr by the case that printed it
    for line in run.stderr.splitlines():
        case = line[3:] if line.startswith("== ") else case
        if case in segments and not line.startswith("== "):
            segments[case] += line + "\n"
    assert "warning: each epoch trains on 256 of the 1,024" in segments["partial_epoch"]
    assert "each of the 8 replica(s) gets 2 sample(s)" in segments["small_batch"]
    for case in segments:  # each warning on its own pitfall only, and once however often the pitfall repeats
        assert segments[case].count("warning:") == (case != "float64"), (case, segments[case])
    # float64 arrays of 64 KB: their conversion costs nothing measurable, so nothing is said (issue 22); the
    # warning's firing on a measured cost is tests/test_checks.py's


@pytest.mark.multi_device
def test_a_clean_script_gets_no_warning_even_with_odd_sizes():
    run = support.run_cli("run", "--simulate-devices", "8", support.SCRIPTS / "pitfalls.py", "clean", timeout=180)

    assert run.returncode == 0, run.stderr
    assert "warning" not in run.stderr and "done" in run.stderr


@pytest.mark.multi_device
@pytest.mark.parametrize(
    "case, says",
    [
        ("one_hot_sparse", "Change the loss to 'categorical_crossentropy'"),
        ("indices_categorical", "Change the loss to 'sparse_categorical_crossentropy'"),
    ],
)
def test_where_keras_would_crash_the_error_says_what_to_change(case, says):
    run = support.run_cli("run", "--simulate-devices", "8", support.SCRIPTS / "pitfalls.py", case, timeout=180)

    assert run.returncode == 2, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("acceltrain: error: ")]
    assert len(errors) == 1 and says in errors[0], run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.multi_device
def test_a_batch_the_replicas_cannot_split_runs_on_one_device_saying_why():
    """Issue 22: refused before ("Pass a multiple of 8"), though another batch is another algorithm."""
    run = support.run_cli("run", "--simulate-devices", "8", support.SCRIPTS / "pitfalls.py", "uneven_batch", timeout=180)

    assert run.returncode == 0, run.stderr
    assert ("acceltrain: batch_size=100 does not divide over 8 replicas, and another batch would train another way: "
            "such calls run undistributed, on one device, as the script makes them (the plain run's math). To split it "
            "over the replicas, pass a multiple of 8 (96 or 104)") in run.stderr
    assert "ran on one device, undistributed (batch_size=100 does not divide" in run.stderr
    assert "warning" not in run.stderr


def test_the_script_keeps_its_argv_and_exit_code():
    run = support.run_cli("run", support.SCRIPTS / "exits.py", "code", "3", timeout=120)

    assert run.returncode == 3
    assert f"argv: ['{support.SCRIPTS / 'exits.py'}', 'code', '3']" in run.stdout


def test_the_script_error_is_shown_as_its_own():
    run = support.run_cli("run", support.SCRIPTS / "exits.py", "raise", timeout=120)

    assert run.returncode == 1
    traceback = run.stderr[run.stderr.index("Traceback"):].split("\nacceltrain: ")[0]  # up to acceltrain's next line
    assert "ValueError: the script's own error" in traceback
    files = _frame_files(traceback)
    assert files[0].name == "exits.py" and not _acceltrain_frames(files)  # no runpy or acceltrain frames
    assert not [f for f in files if "runpy" in f.name]


def test_an_error_inside_fit_shows_no_acceltrain_frames():
    run = support.run_cli("run", support.SCRIPTS / "exits.py", "fit", timeout=180)

    assert run.returncode == 1, run.stderr
    traceback = run.stderr[run.stderr.index("Traceback"):]
    assert "ValueError: the script's own error" in traceback and "in on_train_begin" in traceback
    assert not _acceltrain_frames(_frame_files(traceback))  # the hooks around Keras's fit (backends/) are not the script's


def _frame_files(traceback: str) -> list:
    """The file of each frame of a printed traceback."""
    import re

    return [Path(name) for name in re.findall(r'^  File "([^"]+)", line \d+', traceback, flags=re.MULTILINE)]


def _acceltrain_frames(files) -> list:
    """Those of acceltrain's own modules (the package folder, wherever the checkout is and whatever it is named:
    a clone is a folder named acceltrain too)."""
    import acceltrain

    package = Path(acceltrain.__file__).resolve().parent
    return [f for f in files if f.resolve().is_relative_to(package)]


WRAPPERS = """
import json, sys
import keras
from acceltrain.backends import keras_internals
from acceltrain.commands.run import run_script
from acceltrain.runtime import Settings

trainer = keras_internals.trainer_class(keras.backend.backend())
kerass_own = {name: getattr(trainer, name) for name in ("fit", "evaluate", "predict")}
code = run_script(sys.argv[1], settings=Settings(backend=keras.backend.backend()))
print("after close:", json.dumps({name: getattr(trainer, name) is method for name, method in kerass_own.items()}))
sys.exit(code)
"""


@pytest.mark.parametrize("backend", ["jax", pytest.param("tensorflow", marks=pytest.mark.tensorflow)])
def test_kerass_fit_is_wrapped_once_while_a_script_runs_and_is_its_own_after(backend):
    done = support.python("-c", WRAPPERS, support.SCRIPTS / "counts_wrappers.py", timeout=240, KERAS_BACKEND=backend)

    assert done.returncode == 0, done.stderr
    seen = [line for line in done.stdout.splitlines() if line.startswith("during ")]
    # fit, its validation (inside fit: Keras's own evaluate), evaluate, predict: one wrapper each, while each runs.
    assert seen == ["during fit: 1", "during evaluate: 1", "during evaluate: 1", "during predict: 1"], done.stdout
    assert 'after close: {"fit": true, "evaluate": true, "predict": true}' in done.stdout


def test_under_8_simulated_devices_each_door_into_keras_is_one_wrapper_deep():
    """Issue 36: during a script's fit under `run --simulate-devices 8` (the ledger's watch and the step timed on one
    device both hook its train function), fit/evaluate/predict, the model's train function, Model.save/save_weights
    and keras.config.set_backend each have one of acceltrain's wrappers over Keras's own (the train function had
    two stacked, which broke once)."""
    run = support.run_cli("run", "--simulate-devices", "8", support.SCRIPTS / "counts_wrappers.py", timeout=240)

    assert run.returncode == 0, run.stderr
    seen = [line for line in run.stdout.splitlines() if not line.startswith("acceltrain")]
    assert seen == ["during fit: 1", "train_function: 1", "during evaluate: 1", "during evaluate: 1",
                    "during predict: 1", "save: 1 save_weights: 1", "set_backend: 1"], run.stdout


def test_a_missing_script_is_a_usage_error():
    run = support.run_cli("run", "no_such_script.py", timeout=60)

    assert run.returncode == 2 and "Received script 'no_such_script.py', which is not a file" in run.stderr


# --- predict: what a plain run returns, on any device count --------------------------------------------

def _predictions(stdout: str) -> dict:
    """{name: (shape, values)} from the 'predict NAME: shape S values V ...' lines of scripts/predicts.py."""
    found = {}
    for line in stdout.splitlines():
        if "predict " in line and " values " in line:
            head, values = line.split("predict ", 1)[1].split(" values ")
            name, shape = head.split(": shape ")
            found[name] = (shape, np.array(values.split(), dtype=float))
    return found


def assert_same_predictions(got: dict, expected: dict) -> None:
    assert set(got) == set(expected) == {"3", "37 by 8", "37", "37 tensor", "37 dataset"}
    for name, (shape, values) in expected.items():
        assert got[name][0] == shape, name
        np.testing.assert_allclose(got[name][1], values, atol=2e-6, err_msg=name)


@pytest.mark.multi_device
def test_predict_on_4_simulated_devices_returns_what_a_plain_run_returns():
    script = support.SCRIPTS / "predicts.py"
    plain = support.python(script, "--evaluate", timeout=120, KERAS_BACKEND="jax")
    under_run = support.run_cli("run", "--simulate-devices", "4", script, "--evaluate", timeout=200)
    assert plain.returncode == 0, plain.stderr
    assert under_run.returncode == 0, under_run.stderr
    assert_same_predictions(_predictions(under_run.stdout), _predictions(plain.stdout))
    # issue 31: evaluate's 37 samples, repeated 4 times over 4 devices, said in one line, the loss the plain run's
    repeated = [line for line in under_run.stderr.splitlines() if "each sample counted" in line]
    assert repeated == ["acceltrain: evaluate's x: each sample counted 4 times so every batch divides over 4 replicas "
                        "(metrics unchanged, none dropped)"], under_run.stderr
    losses = [float(out.split("evaluate 37: loss ")[1].split()[0]) for out in (under_run.stdout, plain.stdout)]
    assert abs(losses[0] - losses[1]) < 1e-5, losses


@pytest.mark.multi_device
def test_a_plain_script_runs_with_its_weights_sharded():
    run = support.run_cli("run", "--simulate-devices", "8", "--distribution", "fsdp",
                          support.REPO / "tests" / "scripts" / "sharded_fit.py", timeout=300)

    assert run.returncode == 0, run.stderr
    assert "→ FSDP over 8 replicas" in run.stderr
    assert "weights sharded: " in run.stderr and "the first device holds" in run.stderr
    assert "kernel: PartitionSpec(None, 'batch')" in run.stdout or "kernel: P(None, 'batch')" in run.stdout


@pytest.mark.multi_device
@pytest.mark.parametrize("args, name, mesh, replicas, spec", [
    (("model", "1x4"), "ModelParallel", "batch 1 × model 4", 1, "(None, 'model')"),
    (("model", "2x2"), "ModelParallel", "batch 2 × model 2", 2, "(None, 'model')"),
    (("data",), "DataParallel", "batch 4", 4, "(None, None)"),
    pytest.param(("gemma", "2x2"), "ModelParallel", "batch 2 × model 2", 2, "('model', 'batch')",
                 marks=pytest.mark.slow),  # GemmaBackbone.get_layout_map: keras_hub's own; about 50 s here
])
def test_a_distribution_the_script_sets_is_kept_and_named_with_its_meshs_batch_split(args, name, mesh, replicas,
                                                                                       spec):
    """Issue 41: a script's own ModelParallel (a LayoutMap over batch 1 × model 4) kept its layout under run, but the
    lines said "global batch 32 = 8 × 4 replica(s)" and "ran on DataParallel over 4 replica(s)". The layout is the one
    the script's map gives (as plainly), and every line names the script's distribution with its mesh's split."""
    run = support.run_cli("run", "--simulate-devices", "4", support.SCRIPTS / "own_distribution.py", *args, timeout=400)
    assert run.returncode == 0, run.stderr
    own = f"the script's own {name} (mesh {mesh})"
    assert f"kernel spec: {spec}" in run.stdout
    assert (f"acceltrain: distribution: {own} is kept: its calls run under it as they do plainly ({replicas} "
            "replica(s): its mesh's batch axis), its layout as it set it; acceltrain's DataParallel over 4 replica(s) "
            "is not applied to them") in run.stderr, run.stderr
    if args[0] != "gemma":  # keras_hub feeds its task's fit a Grain dataset: the stream's rules, no batch line
        assert f"acceltrain: fit: global batch 32 = {32 // replicas} × {replicas} replica(s) of {own}; " in run.stderr
    said = [line for line in run.stderr.splitlines() if line.startswith("acceltrain: run: ")]
    assert said == [f"acceltrain: run: the script's Keras calls (1 fit, 1 evaluate) ran on {own}"], run.stderr
    assert "ran on DataParallel" not in run.stderr and "replica(s)" not in run.stderr.replace(
        "DataParallel over 4 replica(s) is not", "").replace(f"{replicas} replica(s)", "")


from acceltrain.commands.plain_check import Verdict  # noqa: E402


def test_the_plain_command_is_the_users_interpreter_arguments_and_backend():
    """Issue 22: "run: python /path/script.py" lost the interpreter, the script's arguments and the backend."""
    import sys
    from pathlib import Path

    from acceltrain.commands.run import _plain_command

    command = _plain_command(Path("my dir/train.py"), ["--epochs", "3", "--name", "a b"], "tensorflow")
    assert command == f"KERAS_BACKEND=tensorflow {sys.executable} 'my dir/train.py' --epochs 3 --name 'a b'"


@pytest.mark.multi_device
def test_a_script_that_fails_plainly_too_is_told_the_error_is_its_own():
    plain = support.python(support.SCRIPTS / "old_train_step.py", timeout=180, KERAS_BACKEND="jax")
    run = support.run_cli("run", "--simulate-devices", "2", support.SCRIPTS / "old_train_step.py", timeout=180)

    assert plain.returncode == 1 and "TypeError" in plain.stderr
    assert run.returncode == 1 and "TypeError" in run.stderr
    assert ("acceltrain: model.fit (the script's call 1 of fit) fails the same way without acceltrain (TypeError in the "
            "same script run plainly, in a fresh process): the error is the script's, not acceltrain's."
            ) in run.stderr.splitlines()[-2]
    assert run.stderr.splitlines()[-1].startswith("acceltrain: where the ")  # a failed run's time is told too


# --- Saving in a job of several processes: each process its own whole copy ----------------------------

def _process_1_of_2(split=()):
    """What _saving reads of a Runtime: process 1 of 2, with `split` the weights no process holds whole."""
    from types import SimpleNamespace

    framework = SimpleNamespace(split_over_processes=lambda variables: list(split))
    return SimpleNamespace(num_processes=2, process_index=1, distribution_name="FSDP", backend_module=framework,
                           backend="jax")


@pytest.fixture
def tensorflow_may_start():
    """Keras's model.save imports TensorFlow, which sets environment variables as it starts (TF2_BEHAVIOR,
    HDF5_PLUGIN_PATH ...): put back after the test, so the check for leaked variables looks at acceltrain's."""
    import os

    before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(before)


def _acceltrains_wrappers(method) -> int:
    """acceltrain's functions over Keras's own `method`, following __wrapped__."""
    import acceltrain

    package, count = Path(acceltrain.__file__).resolve().parent, 0
    while method is not None:
        count += Path(method.__code__.co_filename).resolve().is_relative_to(package)
        method = getattr(method, "__wrapped__", None)
    return count


def _small_model():
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    return model


def test_every_process_saves_its_own_copy_renamed_onto_the_path(runtime, tmp_path, tensorflow_may_start):
    import keras

    from acceltrain.commands.run import _saving

    model = _small_model()
    with _saving(_process_1_of_2()):
        assert _acceltrains_wrappers(keras.Model.save) == 1  # one door: the copy and the TensorFlow-free save in it
        model.save(tmp_path / "m.keras")
        model.save_weights(tmp_path / "m.weights.h5")
        model.save(tmp_path / "m.keras")  # a ModelCheckpoint's next epoch: replaced whole
        model.save(tmp_path / "unzipped", zipped=False)  # a folder: no rename; process 0 writes it

    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.keras", "m.weights.h5"]  # no partial file left
    loaded = keras.models.load_model(tmp_path / "m.keras")  # process 1 reads back what it saved
    assert all((a == b).all() for a, b in zip(loaded.get_weights(), model.get_weights()))


def test_a_save_that_fails_half_way_leaves_the_last_whole_file_and_nothing_else(runtime, tmp_path, monkeypatch,
                                                                                 tensorflow_may_start):
    import keras

    from acceltrain.commands.run import _saving

    def half_then_fail(model, filepath, overwrite=True, max_shard_size=None):
        with open(filepath, "wb") as file:
            file.write(b"half a file")
        raise OSError("No space left on device")

    (tmp_path / "m.weights.h5").write_bytes(b"the last whole copy")
    monkeypatch.setattr(keras.Model, "save_weights", half_then_fail)
    with _saving(_process_1_of_2()), pytest.raises(OSError, match="No space left"):
        _small_model().save_weights(tmp_path / "m.weights.h5")

    assert [p.name for p in tmp_path.iterdir()] == ["m.weights.h5"]
    assert (tmp_path / "m.weights.h5").read_bytes() == b"the last whole copy"


def test_weights_split_over_processes_are_refused_before_anything_is_written(runtime, tmp_path, tensorflow_may_start):
    from acceltrain.commands.run import _saving
    from acceltrain.errors import UsageError

    with _saving(_process_1_of_2(split=["sequential/dense/kernel"])), pytest.raises(UsageError) as refused:
        _small_model().save(tmp_path / "m.keras")

    assert str(refused.value).startswith(f"Received model.save('{tmp_path / 'm.keras'}') in a job of 2 processes, "
                                         "with 1 of the ")
    assert "(FSDP; e.g. sequential/dense/kernel)" in str(refused.value)
    assert "--distribution data" in str(refused.value) and "Nothing was written." in str(refused.value)
    assert not list(tmp_path.iterdir())


AUGMENTING = support.SCRIPTS / "in_model_augmentation.py"


@pytest.mark.slow
@pytest.mark.multi_device
@pytest.mark.parametrize("options, says", [
    ((), "compiling the model's step (jit_compile=True): Keras marks RandomCrop as not compilable"),
    (("--layer", "zoom"), "compiling the model's step (jit_compile=True): Keras marks RandomZoom as not compilable"),
    (("--eager",), "running on one device, on the whole global batch: run_eagerly=True"),
    # A table looked up in numpy, as StringLookup/IntegerLookup/Hashing look theirs up: no compiler takes it.
    (("--layer", "lookup", "--train-samples", "256", "--epochs", "1"),
     "running on one device, on the whole global batch: __main__.GammaLookup cannot be compiled"),
])
def test_a_model_keras_would_run_op_by_op_trains_on_4_cpu_devices_saying_how(options, says):
    """Op by op on several CPU devices, XLA's collectives deadlock (decisions.choose_op_by_op_step): the step is
    compiled where JAX can, else the call runs on one device."""
    plain = support.python(AUGMENTING, *options, timeout=600, KERAS_BACKEND="jax")
    run = support.run_cli("run", "--simulate-devices", "4", AUGMENTING, *options, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stderr.count(says) == 1, run.stderr
    # It learned, both ways: equal to a plain run at chance would show only that nothing hung (issue 41: the stress
    # benchmark's RandomCrop job sat at 12.7 %). Measured plainly: crop 0.674, zoom 0.809, eager 0.674, lookup 0.252.
    learned = _above_chance(samples=512)  # the script's --test-samples
    assert support.accuracy(plain.stdout) > learned and support.accuracy(run.stdout) > learned, (learned, run.stdout)
    assert abs(support.accuracy(run.stdout) - support.accuracy(plain.stdout)) < 0.05


def _above_chance(samples: int) -> float:
    """The accuracy a model that learned nothing stays under on MNIST's first `samples` test images: the most common
    class's share (what always answering it scores) plus four standard errors of a test of that many samples."""
    import numpy as np

    from acceltrain.datasets import MNIST_PATH

    with np.load(MNIST_PATH) as mnist:
        share = np.bincount(mnist["y_test"][:samples]).max() / samples  # 0.135 for the first 512
    return float(share + 4 * (share * (1 - share) / samples) ** 0.5)  # 0.195


def _keep(tmp_path, source, backend, monkeypatch, env=None):
    """run's _keep_the_scripts_backend on a script of `source`: (KERAS_BACKEND after it, the lines it said)."""
    from acceltrain import log
    from acceltrain.commands.run import _keep_the_scripts_backend

    said = []
    monkeypatch.setattr(log, "info", lambda message: said.append(("info", message)))
    monkeypatch.setattr(log, "warn", lambda message: said.append(("warn", message)))
    monkeypatch.delenv("ACCELTRAIN_LAUNCHER_PID", raising=False)
    if env is None:
        monkeypatch.delenv("KERAS_BACKEND", raising=False)
    else:
        monkeypatch.setenv("KERAS_BACKEND", env)
    script = tmp_path / "script.py"
    script.write_text(source)
    _keep_the_scripts_backend(script, backend)
    import os

    return os.environ.get("KERAS_BACKEND"), said


@pytest.mark.parametrize(
    "source, backend, env, ends_with, says",
    [
        ('import os\nos.environ["KERAS_BACKEND"] = "tensorflow"\n', None, None, "tensorflow",
         ("info", "run: the script sets its Keras backend on line 2 (os.environ['KERAS_BACKEND'] = 'tensorflow'): "
                  "applied before Keras loads")),
        ('import os\nos.environ["KERAS_BACKEND"] = "tensorflow"\n', None, "jax", "tensorflow", ("info", "line 2")),
        ('import os\nos.environ.setdefault("KERAS_BACKEND", "tensorflow")\n', None, "jax", "jax", None),  # env wins
        ('import os\nos.environ.setdefault("KERAS_BACKEND", "tensorflow")\n', None, None, "tensorflow", ("info", "")),
        ('import keras\nkeras.config.set_backend("tensorflow")\n', None, None, "tensorflow", ("info", "line 2")),
        ('import os\nos.environ["KERAS_BACKEND"] = "tensorflow"\n', "jax", None, None,
         ("warn", "--backend jax overrules it (acceltrain loads Keras before the script runs). To keep the script's, "
                  "leave out --backend.")),
        ('import os\nos.environ["KERAS_BACKEND"] = "tensorflow"\n', "tensorflow", None, None, None),
        ('import os, sys\nos.environ["KERAS_BACKEND"] = sys.argv[1]\n', None, None, None,
         ("warn", "which acceltrain cannot read before: Keras is loaded first, with the backend the next line names. "
                  "To choose it, pass --backend jax or --backend tensorflow.")),
        ("import keras\n", None, None, None, None),
    ],
)
def test_the_scripts_own_backend_is_kept_as_a_plain_run_keeps_it(tmp_path, monkeypatch, source, backend, env,
                                                                   ends_with, says):
    """Issue 22: a script setting os.environ["KERAS_BACKEND"] = "tensorflow" ran on JAX, the banner saying "the
    default". Each of the three shapes, against the environment and --backend."""
    got, said = _keep(tmp_path, source, backend, monkeypatch, env)
    assert got == (ends_with or env)
    assert len(said) == (says is not None) and (says is None or (said[0][0] == says[0] and says[1] in said[0][1]))


def test_a_scripts_set_backend_does_not_reload_keras_under_run(runtime):
    """keras.config.set_backend drops every keras module: what the script built next would bypass acceltrain."""
    import keras

    from acceltrain.commands.run import _no_reload_of_keras
    from acceltrain.errors import UsageError

    with _no_reload_of_keras("jax"):
        keras.config.set_backend("jax")  # read from the source and loaded already: nothing to do
        with pytest.raises(UsageError, match=r"keras.config.set_backend\('tensorflow'\) .* Pass --backend tensorflow"):
            keras.config.set_backend("tensorflow")
    import sys

    assert "keras.src.backend.jax.trainer" in sys.modules  # nothing was dropped


@pytest.mark.slow
@pytest.mark.tensorflow
@pytest.mark.parametrize("line", ['import os\nos.environ["KERAS_BACKEND"] = "tensorflow"\nimport keras\n',
                                  'import os\nos.environ.setdefault("KERAS_BACKEND", "tensorflow")\nimport keras\n',
                                  'import keras\nkeras.config.set_backend("tensorflow")\nimport keras\n'])
def test_a_script_that_sets_its_backend_runs_on_it_under_run(tmp_path, line):
    script = tmp_path / "sets.py"
    script.write_text(line + "import numpy as np\n"
                      "m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])\nm.compile('sgd', 'mse')\n"
                      "m.fit(np.ones((8, 3)), np.ones((8, 1)), verbose=0)\nprint('backend:', keras.backend.backend())\n")
    run = support.run_cli("run", script, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "backend: tensorflow" in run.stdout
    assert "tensorflow on cpu" in run.stderr and "run: the script sets its Keras backend on line 2" in run.stderr


SAVES = """
import sys
from pathlib import Path

import keras
import numpy as np

out = Path(sys.argv[1])
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
model.compile("adam", "mse")
model.fit(np.ones((32, 4)), np.zeros((32, 2)), batch_size=8, epochs=1, verbose=0)
model.save(out / "m.keras")
model.save_weights(out / "m.weights.h5")
loaded = keras.models.load_model(out / "m.keras")
assert all((a == b).all() for a, b in zip(loaded.get_weights(), model.get_weights()))
print("tensorflow imported:", "tensorflow" in sys.modules)
"""


def test_a_jax_scripts_save_does_not_import_tensorflow_under_run(tmp_path, cli):
    """Keras's save imports TensorFlow, where installed, only to find no TensorFlow object in a JAX model: seconds
    of a run. Under `run` it does not; plainly it does (so this test can tell)."""
    script = tmp_path / "saves.py"
    script.write_text(SAVES)
    (tmp_path / "plain").mkdir()
    (tmp_path / "run").mkdir()
    plain = support.python(script, tmp_path / "plain", timeout=120, KERAS_BACKEND="jax")
    assert plain.returncode == 0 and "tensorflow imported: True" in plain.stdout, plain.stderr
    ran = cli("run", script, tmp_path / "run")
    assert ran.returncode == 0, ran.stderr
    assert "tensorflow imported: False" in ran.stdout


# --- The verdict's plain run (plain_check.py): a fresh process, stopped at the call ------------------------------

def test_the_plain_run_of_a_verdict_stops_at_the_failed_call_and_says_how_it_ended(tmp_path):
    """Issue 33: the script run plainly in a fresh process until its N-th fit returns or raises, then ended, so nothing
    after that call runs twice; a call it never reaches, and a script that sets another backend, said as they are."""
    import sys

    from acceltrain.commands import plain_check

    script = tmp_path / "two_fits.py"
    script.write_text(
        'import os, sys\nos.environ["KERAS_BACKEND"] = "tensorflow"  # overruled: Keras is loaded on jax first\n'
        "import keras, numpy as np\nfrom pathlib import Path\n"
        "model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])\nmodel.compile('sgd', 'mse')\n"
        "x = np.ones((8, 3), 'float32')\nmodel.fit(x, x[:, :1], verbose=0)\n"
        "Path(sys.argv[1], 'backend').write_text(keras.backend.backend())\n"
        "model.fit(x, x[:5, :1], verbose=0)  # 8 inputs, 5 targets: the script's own error\n"
        "Path(sys.argv[1], 'after').write_text('ran')\n")
    env = support.env()
    first = plain_check.judge(script, [str(tmp_path)], "jax", "fit", 1, 120, env)
    assert first == Verdict("passed") and not (tmp_path / "backend").exists()  # ended right after the call
    second = plain_check.judge(script, [str(tmp_path)], "jax", "fit", 2, 120, env)
    assert second.outcome == "failed" and second.error_type == "ValueError", second
    assert (tmp_path / "backend").read_text() == "jax" and not (tmp_path / "after").exists()
    assert plain_check.judge(script, [str(tmp_path)], "jax", "predict", 1, 120, env).outcome == "not reached"

    assert plain_check.shown(script, ["a"], "tensorflow") == f"KERAS_BACKEND=tensorflow {sys.executable} {script} a"
    assert plain_check.shown(script, ["a"], "jax") == (f"{sys.executable} -m acceltrain.commands.plain_check --backend "
                                                       f"jax -- {script} a")  # the variable alone would not hold


def test_a_scripts_fit_under_run_compiles_no_program_more_than_the_same_fit_through_runtime_fit(tmp_path):
    """Adam + accuracy, a partial last batch, validation data, on one device: the fit's programs (issue 43: the seed's
    MLP compiled 23 under `acceltrain run` against 10 through Runtime.fit) are the same by name either way, at most 5:
    the optimizer's slots in one program, the loop of steps, Keras's step on the partial batch, a test step a
    validation batch shape; and the two train the same."""
    def fit_programs(stderr: str) -> list[str]:
        lines = stderr.splitlines()
        within = lines[lines.index("fit starts"):lines.index("fit ends")]
        return [line.split()[2].rstrip(":") for line in within if line.startswith("acceltrain: program ")]

    script = support.SCRIPTS / "counts_programs.py"
    run = support.run_cli("run", "-v", script, "script", timeout=300, JAX_COMPILATION_CACHE_DIR=str(tmp_path / "a"))
    library = subprocess.run([sys.executable, script, "library"], env=support.env(
        JAX_COMPILATION_CACHE_DIR=str(tmp_path / "b")), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and library.returncode == 0, run.stderr[-2000:] + library.stderr[-2000:]
    by_run, by_library = fit_programs(run.stderr), fit_programs(library.stderr)
    assert len(by_run) <= len(by_library) <= 5, (by_run, by_library)
    assert sorted(by_run) == sorted(by_library), (by_run, by_library)
    assert run.stdout.strip().splitlines()[-1] == library.stdout.strip().splitlines()[-1]  # the same evaluation
