"""A model's first fit made to fit (layout/autopilot.py), on the 8 simulated CPU devices, judged by XLA:CPU's
memory analysis of the compiled step: a model built in scope() born within the budget and laid out sharded before
its first step; a step whose activations do not fit trained with gradient accumulation, the global batch kept;
and the stops, with the autopilot and without it."""

import numpy as np
import pytest

import acceltrain
from acceltrain.errors import UsageError
from tests import support

pytestmark = pytest.mark.multi_device

DEVICES = 8
MIB = 1024**2


def _wide_mlp(gradient_accumulation_steps=None):
    """2.1M parameters with Adam: 32.1 MiB of training state replicated (tests/layout/test_placement.py's)."""
    import keras

    model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(1024, activation="relu", name="dense_0"),
                              keras.layers.Dense(1024, activation="relu", name="dense_1"),
                              keras.layers.Dense(512, activation="relu", name="dense_2"),
                              keras.layers.Dense(10, name="logits")], name="wide_mlp")
    model.compile(keras.optimizers.Adam(1e-3, gradient_accumulation_steps=gradient_accumulation_steps),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def _wide_data(n=256):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 512)).astype(np.float32)
    return x, x[:, :10].argmax(axis=1).astype(np.int32)


def _share(runtime, variables) -> float:
    whole = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in variables)
    return runtime.backend_module.first_device_bytes(variables) / whole


def test_a_model_built_in_scope_is_born_within_the_budget_and_sharded_before_its_first_step(capsys):
    runtime = acceltrain.connect(simulate_devices=DEVICES, device_memory="24MiB")
    runtime.seed(0)
    with runtime.scope():
        model = _wide_mlp()
    # Born: 18 MiB of training state a device (24 less 25%): dense_0 (8 MiB of state) whole, dense_1 (16 MiB)
    # past the budget cut, dense_2 (8 MiB more) cut; the logits (80 KiB of state) fit the budget whole.
    kernels = {v.path.split("/")[1]: v for v in model.weights if len(v.shape) == 2}
    assert [_share(runtime, [kernels[name]]) for name in ("dense_0", "dense_1", "dense_2", "logits")] == [1, 1 / 8,
                                                                                                         1 / 8, 1]
    x, y = _wide_data()
    history = runtime.fit(model, x, y, batch_size=64, epochs=2, verbose=0)

    err = capsys.readouterr().err
    assert "autopilot: wide_mlp (2.1M params): its training step, compiled here at batch 64, needs data parallel " \
           in err and "a device, of 24.0 MiB (device_memory=) → fsdp; 2.0 MiB of variables moved to it" in err
    assert runtime.distribution_name == "FSDP"
    # Every kernel cut over 8 before the first step, and Adam's slots, made by fit, with them.
    assert _share(runtime, list(kernels.values())) == pytest.approx(1 / 8, abs=1e-3)
    slots = [v for v in model.optimizer.variables if len(v.shape) >= 1]
    assert len(slots) == 2 * len(model.trainable_variables) and _share(runtime, slots) < 1 / 8 + 0.002
    assert history.history["loss"][-1] < history.history["loss"][0]
    # A second fit of the same model is not weighed again, and evaluate runs under its layout.
    runtime.fit(model, x, y, batch_size=64, verbose=0)
    assert "autopilot" not in capsys.readouterr().err
    assert runtime.evaluate(model, x, y, batch_size=64, verbose=0)["accuracy"] > 0


def test_a_model_that_fits_stays_data_parallel_and_is_said_so(capsys):
    runtime = acceltrain.connect(simulate_devices=DEVICES, device_memory="1GiB", verbose=False)
    with runtime.scope():
        model = _wide_mlp()
    runtime.fit(model, *_wide_data(64), batch_size=64, verbose=0)
    err = capsys.readouterr().err
    assert "autopilot: wide_mlp (2.1M params): its training step, compiled here at batch 64, needs data parallel" in err
    assert "of 1.0 GiB (device_memory=) → data parallel" in err and "moved" not in err
    assert runtime.distribution_name == "DataParallel" and _share(runtime, model.weights) == 1.0


def test_nothing_is_weighed_where_the_device_memory_is_unknown(runtime, capsys):
    with runtime.scope():
        model = _wide_mlp()
    runtime.fit(model, *_wide_data(64), batch_size=64, verbose=0)
    assert "autopilot" not in capsys.readouterr().err and _share(runtime, model.weights) == 1.0


def test_a_model_that_fits_no_way_stops_before_training_naming_what_else_would_help():
    runtime = acceltrain.connect(simulate_devices=DEVICES, device_memory="2MiB", verbose=False)
    with runtime.scope():
        model = _wide_mlp()
    with pytest.raises(UsageError) as stopped:
        runtime.fit(model, *_wide_data(64), batch_size=64, verbose=0)
    message = str(stopped.value)
    assert message.startswith("wide_mlp (2.1M params) does not fit 2.0 MiB a device (device_memory=): its training "
                              "step, compiled here at batch 64, needs data ")
    assert "fsdp + accumulate 2 " in message and "fsdp + accumulate 8 " in message  # every step that divides 64 / 8
    assert "bfloat16 compute (precision='mixed_bfloat16' (connect): models built in it)" in message
    assert "keras.RematScope(mode='list_of_layers', layer_names=['dense_0', 'dense_1', 'dense_2'] ...)" in message
    assert "acceltrain.plan('here', model='FILE.py:FUNCTION', batch_size=64, device_memory='2MiB')" in message
    assert model.optimizer.iterations == 0  # stopped before any step


def test_the_plan_line_of_a_stop_keeps_the_precision_asked_for():
    """plan's 'auto' is the runtime's own 'auto' on the same hardware; a precision the user asked for (float32 where a
    TPU's auto would compute in bfloat16) must travel to the plan line, or the plan would weigh another step."""
    runtime = acceltrain.connect(simulate_devices=DEVICES, device_memory="2MiB", precision="float32", verbose=False)
    with runtime.scope():
        model = _wide_mlp()
    with pytest.raises(UsageError) as stopped:
        runtime.fit(model, *_wide_data(64), batch_size=64, verbose=0)
    assert ("acceltrain.plan('here', model='FILE.py:FUNCTION', batch_size=64, device_memory='2MiB', "
            "precision='float32')") in str(stopped.value)


def test_a_run_users_stop_names_flags_and_the_plan_command_not_python_calls():
    """Runtime.first_fit under the CLI (errors.cli_names, as `acceltrain run` calls it): the stop names --precision
    and the `acceltrain plan` command line, never connect(), acceltrain.plan() or runtime.build."""
    from acceltrain.errors import cli_names

    runtime = acceltrain.connect(simulate_devices=DEVICES, device_memory="2MiB", verbose=False)
    with runtime.scope():
        model = _wide_mlp()
    with pytest.raises(UsageError) as stopped, cli_names():
        runtime.first_fit(model, *_wide_data(64), batch_size=64)
    message = str(stopped.value)
    assert "does not fit 2.0 MiB a device (--device-memory): " in message
    assert "bfloat16 compute (--precision mixed_bfloat16: models built in it)" in message
    assert ("`XLA_FLAGS=--xla_force_host_platform_device_count=8 acceltrain plan --target here --model "
            "SCRIPT.py:FUNCTION --batch-size 64 --device-memory 2MiB`") in message
    assert not any(call in message for call in ("(connect)", "acceltrain.plan(", "runtime.build", "device_memory="))


def test_the_users_own_gradient_accumulation_is_kept_not_replaced_by_the_lever():
    """An optimizer given gradient_accumulation_steps by the user: the autopilot offers no accumulation of its own
    (it would change their steps and cut their batch); their steps are weighed, and the stop names a smaller batch."""
    runtime = acceltrain.connect(simulate_devices=DEVICES, device_memory="2MiB", verbose=False)
    with runtime.scope():
        model = _wide_mlp(gradient_accumulation_steps=2)
    with pytest.raises(UsageError) as stopped:
        runtime.fit(model, *_wide_data(64), batch_size=64, verbose=0)
    message = str(stopped.value)
    assert "needs data " in message and "accumulate" not in message and "a smaller batch" in message
    assert model.optimizer.gradient_accumulation_steps == 2 and model.optimizer.iterations == 0


# --- The accumulation lever, on a plain script under `acceltrain run` (in this process) -----------------

@pytest.fixture
def run_here(monkeypatch):
    """`acceltrain run` in this process, at the CLI's face (errors.cli_names: messages name its flags): its launcher
    watch (faulthandler on SIGUSR1) left out. The script's keras.utils.set_random_seed imports TensorFlow, which sets
    environment variables as it starts: put back after the test, so the check for leaked variables looks at
    acceltrain's."""
    import dataclasses
    import os

    from acceltrain.commands import run
    from acceltrain.errors import cli_names
    from acceltrain.runtime import Settings

    def run_script(path, **options):  # connect()'s keywords go into the run's Settings
        connecting = {field.name for field in dataclasses.fields(Settings)} & set(options)
        settings = Settings(**{name: options.pop(name) for name in connecting})
        with cli_names():
            return run.run_script(path, settings=settings, **options)

    monkeypatch.setattr(run, "_never_outlive_the_job", lambda: None)
    before = dict(os.environ)
    yield run_script
    os.environ.clear()
    os.environ.update(before)


def test_a_step_whose_activations_do_not_fit_trains_with_accumulation_keeping_the_global_batch(capfd, run_here):
    """tests/scripts/wide_tokens.py, unchanged, with 88 MiB a device: its step compiled here needs more data parallel,
    under fsdp and on the 2 x 4 mesh; fsdp with 2 steps of 256 a weight update fits. Each lever is named with its
    figure and how to turn it off; the script sees 2 weight updates of 512 in 4 steps, its losses falling."""
    code = run_here(str(support.SCRIPTS / "wide_tokens.py"), simulate_devices=DEVICES, device_memory="88MiB")

    out, err = capfd.readouterr()
    assert code == 0, err
    sharding = next(line for line in err.splitlines() if "autopilot: wide_tokens" in line)
    assert "needs data parallel " in sharding and ", fsdp " in sharding and ", a batch x model mesh " in sharding
    assert "of 88.0 MiB (--device-memory) → fsdp;" in sharding and "--distribution NAME chooses yourself" in sharding
    assert ("autopilot: accumulate 2: each weight update sums the gradients of 2 steps of batch 256, so the global "
            "batch stays 512; ") in err and "a device with fsdp (--no-autopilot stops instead)" in err
    assert "fit: global batch 512 = 2 steps × 32 × 8 replica(s)" in err
    assert "updates: 2 steps: 4" in out
    losses = [float(loss) for loss in out.split("losses:")[1].split()]
    assert losses == sorted(losses, reverse=True)


def test_without_the_autopilot_such_a_step_stops_saying_what_it_would_do(run_here):
    with pytest.raises(UsageError, match=r"wide_tokens \(5\.2M params\) does not fit 88\.0 MiB a device "
                                         r"\(--device-memory\): .* The autopilot would train it with fsdp \+ accumulate 2 "
                                         r"\(.* MiB a device\), keeping the global batch of 512: leave --no-autopilot out"
                       ) as stopped:
        run_here(str(support.SCRIPTS / "wide_tokens.py"), simulate_devices=DEVICES, device_memory="88MiB",
                 autopilot=False)
    assert "runtime.build" not in str(stopped.value)  # a run user has no runtime: flags only


TINY_SCRIPT = """
import keras, numpy as np
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x, y = np.random.default_rng(0).random((20, 4)).astype("float32"), np.arange(20) % 3
print("losses:", *model.fit(x, y, epochs=2, verbose=0).history["loss"])
"""


def test_tiny_data_is_weighed_and_verified_at_the_batch_fit_trains(capfd, run_here, tmp_path):
    """20 samples at Keras's default batch of 32 on 8 replicas: fit trains one batch of 16 (inputs/ leaves 4 out).
    The autopilot compiles the step at 16 and --verify compares batches of 16; both refused the script before (fewer
    samples than a batch; a batch of 20 that does not divide over 8, with a traceback)."""
    script = tmp_path / "tiny.py"
    script.write_text(TINY_SCRIPT)
    code = run_here(str(script), simulate_devices=DEVICES, device_memory="1GiB", verify=2)
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "its training step, compiled here at batch 16, needs data parallel" in err
    assert "verify: 2 step(s) of batch 16 on DataParallel and on one device" in err
    assert len(out.split("losses:")[1].split()) == 2


@pytest.mark.slow
def test_an_unchanged_script_of_a_25m_parameter_model_is_sharded_and_trains():
    """Issue 21's script (tests/scripts/wide_dense.py: Dense 4096-4096-1024 at module level, Adam, batch 256), run as a
    user runs it: laid out fsdp before its first step; the first device holds about 1/8 of the weights and of Adam's
    slots (its own figures, from the arrays' addressable_shards); the loss falls. Slow: a 25M-parameter model."""
    run = support.run_cli("run", "--simulate-devices", "8", "--device-memory", "128MiB",
                          support.SCRIPTS / "wide_dense.py", timeout=900)
    assert run.returncode == 0, run.stderr
    assert "autopilot: wide_dense (25.2M params): its training step, compiled here at batch 256, needs data " \
           "parallel " in run.stderr and "of 128.0 MiB (--device-memory) → fsdp;" in run.stderr
    shares = run.stdout.split("first device: weights ")[1].split()
    assert float(shares[0]) < 1 / 8 + 0.002 and float(shares[2]) < 1 / 8 + 0.002  # the biases whole: 0.1253 each
    losses = [float(loss) for loss in run.stdout.split("losses:")[1].split()]
    assert losses[-1] < losses[0]
    assert "runtime.build" not in run.stderr and "Traceback" not in run.stderr


def test_a_librarys_plain_model_fit_is_prepared_as_runtime_fit_prepares_it(capsys):
    """connect() + scope() + Keras's own model.fit outside the scope: the interception's "autopilot" slot finds the
    runtime by the model's layout and lays the model out before its first step."""
    # options of its own (float32 is what auto chooses on CPU): a runtime an earlier test left open with the same
    # options would be given back, its distribution already decided by that test's first fit
    with acceltrain.connect(simulate_devices=DEVICES, device_memory="24MiB", precision="float32",
                            verbose=False) as runtime:
        with runtime.scope():
            model = _wide_mlp()
        model.fit(*_wide_data(64), batch_size=64, verbose=0)
        assert "→ fsdp; 2.0 MiB of variables moved to it" in capsys.readouterr().err
        kernels = [v for v in model.weights if len(v.shape) == 2]
        assert runtime.distribution_name == "FSDP" and _share(runtime, kernels) == pytest.approx(1 / 8, abs=1e-3)


@pytest.mark.slow  # seven builds from shapes and seven compiles: 18 s here, loaded
def test_with_a_build_function_every_lever_is_compiled_and_the_model_built_under_the_first_that_fits(capsys):
    """Runtime.build(build, batch_size=...) (what acceltrain train does): tests/scripts/wide_activations.py at a
    global batch of 1024 with 16 MiB a device fits no sharding; bfloat16 compute, then remat of its five Dense layers,
    then 4 steps of 256 accumulated do (as `acceltrain plan` finds for it), and the model is built so: its layers
    compute in bfloat16, it trains 2 weight updates of 1024 in 8 steps. Each lever is named with its figure."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("wide_activations", support.SCRIPTS / "wide_activations.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    runtime = acceltrain.connect(simulate_devices=DEVICES, device_memory="16MiB", verbose=False)
    model = runtime.build(module.build, batch_size=1024)

    err = capsys.readouterr().err
    assert "autopilot: the training step, compiled here at batch 1024, needs data parallel " in err
    for lever in ("bfloat16: ", "remat: ", "accumulate 4: "):
        assert f"autopilot: {lever}" in err and "(autopilot=False (Runtime.build), --no-autopilot (acceltrain " \
                                                "train) stops instead)" in err
    assert model.layers[1].dtype_policy.name == "mixed_bfloat16" and model.optimizer.gradient_accumulation_steps == 4
    rng = np.random.default_rng(0)
    runtime.fit(model, rng.normal(size=(1024, 128, 64)).astype(np.float32), rng.integers(0, 8, 1024),
                batch_size=1024, epochs=2, verbose=0)
    assert (int(model.optimizer.iterations), int(model.optimizer._iterations)) == (2, 8)


@pytest.mark.slow  # five builds from shapes and five compiles
def test_with_a_build_function_the_users_own_accumulation_is_weighed_and_no_accumulation_lever_is_added(capsys):
    """Runtime.build where the build function's optimizer has gradient_accumulation_steps=2 of the user's: the step
    is weighed with them; the walk offers bfloat16 and remat but no accumulation of its own (it would replace theirs
    and cut their batch), and where nothing else fits it stops, naming each figure, before building."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("wide_activations", support.SCRIPTS / "wide_activations.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built = []

    def build():
        model = module.build()
        model.optimizer.gradient_accumulation_steps = 2
        built.append(model)
        return model

    runtime = acceltrain.connect(simulate_devices=DEVICES, device_memory="16MiB", verbose=False)
    with pytest.raises(UsageError) as stopped:
        runtime.build(build, batch_size=1024)
    message = str(stopped.value)
    assert "The model does not fit 16.0 MiB" in message and "fsdp + bfloat16 + remat " in message
    assert "accumulat" not in message and "accumulate" not in capsys.readouterr().err
    assert built and all(model.optimizer.gradient_accumulation_steps == 2 for model in built)  # never replaced


def test_with_a_build_function_the_model_is_built_in_the_runtimes_precision():
    """Runtime.build(build, batch_size=...) weighs the step in the runtime's precision and builds the model in it: the
    setting chosen starts from it (levers.choose_levers's compute), so building under that setting keeps it (a TPU's
    or an H100's mixed_bfloat16 under 'auto'; here asked for), rather than Setting's float32 default."""
    runtime = acceltrain.connect(simulate_devices=DEVICES, device_memory="1GiB", precision="mixed_bfloat16",
                                 verbose=False)
    model = runtime.build(_wide_mlp, batch_size=64)
    assert {layer.dtype_policy.name for layer in model.layers} == {"mixed_bfloat16"}


@pytest.mark.parametrize("precision, offered", [("auto", True), ("float32", False)])
def test_a_precision_the_user_asked_for_is_not_a_lever(monkeypatch, precision, offered):
    """Runtime.build's walk offers bfloat16 compute only where acceltrain chose the precision: precision='float32'
    (--precision float32) is the user's, kept. Read at the walk's door (levers.choose_levers), before any compile."""
    from acceltrain.layout import autopilot

    class Walked(Exception):
        pass

    def walk(*args, **kwargs):
        raise Walked(kwargs["bfloat16"])

    monkeypatch.setattr(autopilot.levers, "choose_levers", walk)
    runtime = acceltrain.connect(simulate_devices=DEVICES, device_memory="16MiB", precision=precision, verbose=False)
    with pytest.raises(Walked) as walked:
        runtime.build(_wide_mlp, batch_size=64)
    assert walked.value.args == (offered,)


@pytest.mark.slow
def test_accumulation_cuts_the_batch_once_under_checkpoints(capfd, run_here, tmp_path):
    """With --checkpoint-dir each fit is trained by the runtime's own loop (slot "trained", below the autopilot's),
    and the batch is cut once, by the autopilot layer, as without: the same 2 updates in 4 steps, not a batch cut
    twice."""
    from acceltrain.options import Checkpoints

    code = run_here(str(support.SCRIPTS / "wide_tokens.py"), simulate_devices=DEVICES, device_memory="88MiB",
                    checkpoints=Checkpoints(tmp_path / "checkpoints"))  # was checkpoint_dir=: a keyword gone since 75ac4c7
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "updates: 2 steps: 4" in out
