import numpy as np
import pytest

from acceltrain import decisions
from acceltrain.errors import UsageError


@pytest.mark.parametrize(
    "requested, loaded, env, jax_importable, expected",
    [
        (None, None, None, True, "jax"),
        (None, None, None, False, "tensorflow"),
        (None, None, "tensorflow", True, "tensorflow"),
        ("tensorflow", None, "jax", True, "tensorflow"),  # asked for beats the env
        (None, "tensorflow", "jax", True, "tensorflow"),  # already loaded beats everything
        ("jax", "jax", None, True, "jax"),
    ],
)
def test_choose_backend(requested, loaded, env, jax_importable, expected):
    choice, reason = decisions.choose_backend(requested, loaded, env, jax_importable)
    assert choice == expected
    assert reason


FILE = "/home/me/.keras/keras.json"


@pytest.mark.parametrize(
    "requested, loaded, env, in_file, expected, reason",
    [
        (None, None, None, "tensorflow", "tensorflow", f"set in {FILE}"),  # Keras's own config file, over jax
        (None, None, "jax", "tensorflow", "jax", "KERAS_BACKEND"),  # as Keras reads them: the env var wins
        ("jax", None, None, "tensorflow", "jax", "asked for"),
        (None, "jax", None, "tensorflow", "jax", "already loaded"),
        (None, None, None, None, "jax", "the default"),
    ],
)
def test_choose_backend_reads_keras_config_file_after_the_env(requested, loaded, env, in_file, expected, reason):
    choice, why = decisions.choose_backend(requested, loaded, env, True, (in_file, FILE))
    assert choice == expected and reason in why


@pytest.mark.parametrize(
    "loaded, env, in_file, set_before_keras, reason",
    [
        ("jax", None, None, True, "the default, set as Keras was imported after acceltrain"),
        ("jax", "jax", None, False, "Keras was already loaded with it, from KERAS_BACKEND"),
        ("tensorflow", None, "tensorflow", False, f"Keras was already loaded with it, from {FILE}"),
        # `import keras, acceltrain`: Keras loaded first, with its own default; the banner names the order for jax
        ("tensorflow", None, None, False, "Keras was imported before acceltrain, with Keras's own default; import "
                                          "acceltrain first (or set KERAS_BACKEND=jax) for jax"),
    ],
)
def test_choose_backend_says_where_the_loaded_keras_got_its_backend(loaded, env, in_file, set_before_keras, reason):
    assert decisions.choose_backend(None, loaded, env, True, (in_file, FILE), set_before_keras) == (loaded, reason)


def test_a_backend_keras_cannot_switch_to_names_the_order_that_works():
    with pytest.raises(UsageError, match=r"backend='tensorflow'.*already loaded with the 'jax'.*Call "
                                         r"acceltrain\.connect\(backend='tensorflow'\) before `import keras`"):
        decisions.choose_backend("tensorflow", "jax", None, True, (None, FILE), True)


def test_choose_backend_names_the_config_file_of_an_unsupported_backend():
    with pytest.raises(UsageError, match=r"from /home/me/.keras/keras.json: 'torch'.*Valid: jax, tensorflow"):
        decisions.choose_backend(None, None, None, True, ("torch", FILE))


def test_keras_config_backend_reads_the_users_file_not_the_one_keras_writes_itself(tmp_path):
    import json

    from acceltrain import backends

    env = {"KERAS_HOME": str(tmp_path)}
    assert backends.keras_config_backend(env) == (None, str(tmp_path / "keras.json"))  # no file
    (tmp_path / "keras.json").write_text(json.dumps(backends.KERAS_WRITTEN_CONFIG))
    assert backends.keras_config_backend(env)[0] is None  # Keras's own defaults, written on its first import
    (tmp_path / "keras.json").write_text(json.dumps({**backends.KERAS_WRITTEN_CONFIG, "backend": "jax"}))
    assert backends.keras_config_backend(env)[0] == "jax"
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "tensorflow", "floatx": "float32"}))
    assert backends.keras_config_backend(env)[0] == "tensorflow"  # written by someone: a choice
    (tmp_path / "keras.json").write_text("{not json")
    assert backends.keras_config_backend(env)[0] is None


def test_choose_backend_refuses_a_switch_after_keras_loaded():
    with pytest.raises(UsageError, match=r"backend='tensorflow'.*already loaded with the 'jax'.*backend='jax'"):
        decisions.choose_backend("tensorflow", "jax", None, True)


@pytest.mark.parametrize("requested, env", [("torch", None), (None, "torch"), ("JAX", None)])
def test_choose_backend_names_an_unsupported_backend(requested, env):
    with pytest.raises(UsageError, match=r"'(torch|JAX)'.*Valid: jax, tensorflow"):
        decisions.choose_backend(requested, None, env, True)


@pytest.mark.parametrize(
    "requested, num_devices, expected",
    [("auto", 1, "none"), ("auto", 2, "data"), ("auto", 8, "data"), ("none", 8, "none"), ("data", 1, "data"),
     ("fsdp", 8, "fsdp"), ("model", 8, "model"), ("fsdp", 1, "none"), ("model", 1, "none")],
)
def test_choose_distribution(requested, num_devices, expected):
    assert decisions.choose_distribution(requested, num_devices)[0] == expected


def test_choose_distribution_rejects_unknown():
    with pytest.raises(UsageError, match=r"distribution='zero'.*Valid: auto, data, fsdp, model, none"):
        decisions.choose_distribution("zero", 8)


@pytest.mark.parametrize("requested", ["fsdp", "model"])
def test_sharded_distributions_are_refused_on_tensorflow(requested):
    with pytest.raises(UsageError, match=rf"distribution='{requested}' with the tensorflow backend.*--backend jax"):
        decisions.check_distribution(requested, "tensorflow")
    decisions.check_distribution(requested, "jax")
    decisions.check_distribution("data", "tensorflow")


@pytest.mark.parametrize(
    "platform, steps_per_epoch, compiled_with, expected",
    [
        ("cpu", 50, 1, 1),
        ("gpu", 50, 1, 8),
        ("tpu", 50, 1, 32),
        ("tpu", 10, 1, 10),  # never more than an epoch
        ("gpu", 50, 4, 4),  # the model's own compile() setting wins
    ],
)
def test_choose_steps_per_execution(platform, steps_per_epoch, compiled_with, expected):
    assert decisions.choose_steps_per_execution(platform, steps_per_epoch, compiled_with)[0] == expected


def test_steps_per_execution_asked_for_in_fit_wins_and_is_checked():
    assert decisions.choose_steps_per_execution("tpu", 50, 1, requested=1) == (1, "asked for in fit")
    with pytest.raises(UsageError, match=r"steps_per_execution=0.*at least 1"):
        decisions.choose_steps_per_execution("tpu", 50, 1, requested=0)


def test_a_scripts_model_keeps_its_compiled_steps_per_execution_and_says_it_was_not_asked_for_in_fit():
    """`run --checkpoint-dir` said "steps_per_execution 1 (asked for in fit)" of a script whose fit names none."""
    assert decisions.choose_steps_per_execution("tpu", 50, 1, keep_compiled=True) == (
        1, "the model's own, as a plain fit keeps it: its compile()'s, 1 unless set")
    assert decisions.choose_steps_per_execution("cpu", 50, 4, keep_compiled=True)[0] == 4
    assert decisions.choose_steps_per_execution("cpu", 50, 4, requested=2, keep_compiled=True) == (2, "asked for in fit")


@pytest.mark.parametrize("cpu_replicas, compiled_with, expected, said", [
    (4, 4, 1, "steps_per_execution 1 under MirroredStrategy over 4 CPU replicas, not the model's 4: Keras's steps of "
              "several an execution fail there"),  # plain Keras fails so (the function's docstring)
    (2, 32, 1, "callbacks' batch hooks are called every step, not every 32 steps. To keep 32: one device"),
    (4, 1, 1, None),  # nothing to change
    (1, 4, 4, None),  # one replica (or GPUs, not measured: passed as 1): Keras runs its steps of several
])
def test_choose_steps_per_execution_mirrored(cpu_replicas, compiled_with, expected, said):
    steps, why = decisions.choose_steps_per_execution_mirrored(cpu_replicas, compiled_with, "one device")
    assert steps == expected and (why is None if said is None else said in why)


def test_steps_per_execution_override_is_said_with_the_way_to_keep_the_models():
    assert decisions.steps_per_execution_override(4, 4, "gpu") is None
    said = decisions.steps_per_execution_override(1, 32, "tpu")
    assert "steps_per_execution 32 on tpu, not the model's 1" in said and "steps_per_execution=1 to runtime.fit" in said


@pytest.mark.parametrize(
    "y, units, expected",
    [
        (np.array([0, 3, 9]), 10, "SparseCategoricalCrossentropy"),
        (np.array([[0], [3]]), 10, "SparseCategoricalCrossentropy"),
        (np.array([0, 1, 1]), 1, "BinaryCrossentropy"),
        (np.eye(10, dtype="float32")[[1, 2]], 10, "CategoricalCrossentropy"),
        (np.array([0.5, 1.7]), 1, "MeanSquaredError"),
        (np.array([0, 5, 7]), 1, "MeanSquaredError"),
    ],
)
def test_choose_loss(y, units, expected):
    assert decisions.choose_loss(y, units)[0] == expected


@pytest.mark.parametrize(
    "cpu_devices, processes, not_jitted, jit_compile, run_eagerly, expected, why",
    [
        (8, 1, (), True, False, "as is", "compiled"),  # Keras compiles the step itself
        (1, 1, ("RandomCrop",), False, False, "as is", "one device"),  # no collective to overlap
        (0, 1, ("RandomCrop",), False, False, "as is", "one device"),  # accelerators: collectives on the device
        (1, 1, (), False, True, "as is", "one device"),
        (4, 1, ("RandomCrop",), False, False, "compile", "Keras marks RandomCrop as not compilable"),
        (4, 2, ("RandomZoom", "RandomCrop", "RandomZoom"), False, False, "compile", "RandomCrop, RandomZoom"),
        (4, 1, ("RandomZoom", "StringLookup"), False, False, "one device", "StringLookup cannot"),
        (4, 1, ("my_layers.RandomZoom",), False, False, "one device", "my_layers.RandomZoom cannot"),  # a namesake
        (4, 1, ("RandomZoom",), False, True, "one device", "run_eagerly=True"),  # the user's eager step is kept
        (4, 1, (), False, False, "one device", "jit_compile=False"),
        (4, 1, (), True, True, "one device", "run_eagerly=True"),  # Keras: run_eagerly wins over jit_compile
        (2, 2, ("Hashing",), False, False, "refuse", "2 processes"),
        (4, 2, (), False, True, "refuse", "run_eagerly=True"),
    ],
)
def test_choose_op_by_op_step(cpu_devices, processes, not_jitted, jit_compile, run_eagerly, expected, why):
    choice, reason = decisions.choose_op_by_op_step(cpu_devices, processes, not_jitted, jit_compile, run_eagerly)
    assert (choice, why in reason) == (expected, True), reason


@pytest.mark.parametrize(
    "call, samples, batch, replicas, splits_unevenly, expected, why",
    [
        ("fit", 1000, 128, 8, False, "split", "divides"),
        ("fit", 1000, None, 8, False, "split", "divides"),  # Keras's 32
        ("fit", 1000, 100, 1, False, "split", "one replica"),
        ("fit", 40, 1, 4, False, "one device", "batch_size=1 does not divide over 4 replicas"),  # a bag a step
        ("fit", 40, 1, 4, False, "one device", "another batch would train another way"),
        ("evaluate", 40, 1, 4, False, "one device", "does not divide over 4 replicas, and acceltrain keeps the "
                                                    "script's batch. To split"),  # it trains nothing: not said so
        ("predict", 40, 10, 4, False, "one device", "and acceltrain keeps the script's batch"),
        ("predict", 40, 100, 8, False, "one device", "pass a multiple of 8 (96 or 104)"),
        ("fit", 40, None, 6, False, "one device", "batch_size=32 (Keras's default) does not divide"),
        ("fit", 2, 32, 4, False, "one device", "2 training samples, fewer than the 4 replicas"),
        ("fit", 1, 8, 8, False, "one device", "1 training sample, fewer"),
        ("evaluate", 2, 32, 4, False, "split", "divides"),  # evaluate repeats the set: nothing left out
        ("fit", 4, 32, 4, False, "split", "divides"),
        ("fit", 2, 1, 4, True, "split", "splits uneven batches"),  # TensorFlow
    ],
)
def test_choose_batch_split(call, samples, batch, replicas, splits_unevenly, expected, why):
    choice, reason = decisions.choose_batch_split(call, samples, batch, replicas, splits_unevenly)
    assert (choice, why in reason) == (expected, True), reason


def test_zero_weight_padding_is_not_the_same_loss():
    """Why a call no batch of which divides runs on one device rather than padded with samples weighted 0: Keras's
    default reduction divides by every sample of the batch, so two samples padded to four halve the loss (and its
    gradient)."""
    import keras

    loss = keras.losses.MeanSquaredError()
    y_true, y_pred = np.array([[1.0], [2.0]], "float32"), np.zeros((2, 1), "float32")
    padded = loss(np.concatenate([y_true, y_true]), np.concatenate([y_pred, y_pred]),
                  sample_weight=np.array([1, 1, 0, 0], "float32"))
    assert float(loss(y_true, y_pred)) == 2.5 and float(padded) == 1.25


@pytest.mark.parametrize(
    "several, one, says",
    [(0.160, 0.011, "a training step takes 160 ms here, 14.5x the 11.0 ms the same step took on one device"),
     (0.030, 0.010, "3.0x"),  # from 3 times on
     (0.029, 0.010, None),
     (0.010, 0.020, None)],  # faster on several devices: nothing to say
)
def test_slower_on_several_devices(several, one, says):
    line = decisions.slower_on_several_devices(4, several, one, 2.5, 5)
    assert (line is None) == (says is None)
    if says:
        assert line.startswith("4 CPU devices: ") and says in line
        assert "(measured once: 5 steps of a copy of the state on one device, after 2.5 s compiling it)" in line


@pytest.mark.parametrize(
    "epoch, write, expected, says",
    [(10.0, 0.05, 1, "a checkpoint took 50 ms to write, 0.5% of a 10.00 s epoch (≤ 2%) → every epoch"),
     (2.5, 0.05, 1, "2.0% of a 2.50 s epoch (≤ 2%) → every epoch"),  # at the share: still every epoch
     (0.8, 0.062, 4, "a checkpoint took 62 ms to write, 7.8% of a 0.80 s epoch > 2% → every 4 epochs (1.9%)"),
     (0.01, 0.05, 250, "every 250 epochs (2.0%)"),
     (5.0, 10.0, 60, "200.0% of a 5.00 s epoch > 2%; every 100 epochs would leave over 300 s of training between "
                     "checkpoints → every 60 epochs (3.3%)"),
     (400.0, 30.0, 1, "a checkpoint took 30.0 s to write, 7.5% of a 400.00 s epoch > 2%, but two epochs are over "
                      "300 s of training → every epoch"),
     (200.0, 30.0, 1, "but two epochs are over 300 s of training → every epoch")],
)
def test_choose_checkpoint_epochs(epoch, write, expected, says):
    epochs, why = decisions.choose_checkpoint_epochs(epoch, write)
    assert epochs == expected and says in why, why


@pytest.mark.parametrize(
    "epoch, write, left, expected, says",
    [(0.01, 0.05, 19, 250, "→ every 250 epochs (2.0%): past this run's last epoch (19 after the first), so at its end "
                           "only"),
     (0.8, 0.062, 4, 4, "→ every 4 epochs (1.9%): past this run's last epoch (4 after the first), so at its end only"),
     (0.8, 0.062, 5, 4, "→ every 4 epochs (1.9%)"),  # epoch 5 is checkpointed before the run's last
     (10.0, 0.05, 1, 1, "→ every epoch")],  # every epoch is every epoch, however short the run
)
def test_choose_checkpoint_epochs_says_what_happens_against_the_run_s_length(epoch, write, left, expected, says):
    epochs, why = decisions.choose_checkpoint_epochs(epoch, write, epochs_left=left)
    assert epochs == expected and why.endswith(says), why


@pytest.mark.parametrize(
    "step, steps, expected, says",
    [(0.016, 50, None, "a step took 0.016 s, so an epoch of 50 steps takes 1 s (≤ 300 s) → at epochs' ends"),
     (1.0, 300, None, "(≤ 300 s) → at epochs' ends"),  # exactly the most: its end is soon enough
     (2.4, 1000, 125, "a step took 2.4 s, so an epoch of 1000 steps takes 2400 s > 300 s → every 125 steps (300 s) "
                      "within each epoch, and at its end"),
     (400.0, 3, 1, "→ every step (400 s)")],  # a step longer than the most: every step
)
def test_choose_checkpoint_steps(step, steps, expected, says):
    chosen, why = decisions.choose_checkpoint_steps(step, steps)
    assert chosen == expected and says in why, why


@pytest.mark.parametrize(
    "processes, platform, seconds, bound, reason",
    [
        (2, "cpu", 5.0, None, "a job of several processes"),
        (1, "tpu", 5.0, None, "the tpu is held by this process until it ends"),
        (1, "gpu", 5.0, None, "the gpu is held by this process"),
        (1, "cpu", 700.0, None, "the run failed after 700 s; a plain rerun would take as long"),
        (1, "cpu", 5.0, 120.0, "the run failed after 5 s: the plain rerun gets 120 s at most"),
        (1, "cpu", 300.0, 600.0, "the run failed after 300 s: the plain rerun gets 600 s at most"),
    ],
)
def test_choose_plain_recheck(processes, platform, seconds, bound, reason):
    chosen, why = decisions.choose_plain_recheck(processes, platform, seconds)
    assert chosen == bound and why.startswith(reason)


def test_slower_on_several_devices_names_the_processes_of_a_job():
    line = decisions.slower_on_several_devices(4, 0.038, 0.001, 4.4, 5, processes=2)
    assert line.startswith("4 CPU devices over 2 processes: a training step takes 38 ms here, 38.0x the 1.0 ms ")


@pytest.mark.parametrize(
    "backend, arrays, nbytes, device, processes, off, keras_scans, elsewhere, expected, why",
    [
        ("jax", True, 2**20, 2**30, 1, "", False, "", True, "1.0 MiB of 1.0 GiB, at most 25%"),
        ("jax", True, 2**20, 2**30, 1, "", False, "", True, "--device-data off (Runtime.keep_data_on_devices('off'), "
         "ACCELTRAIN_DEVICE_DATA=0) turns it off"),
        ("jax", True, 2**29, 2**30, 1, "", False, "", False, "too large: 512.0 MiB of 1.0 GiB"),
        ("jax", True, 2**20, 2**30, 1, "ACCELTRAIN_DEVICE_DATA=0", False, "", False,
         "turned off: ACCELTRAIN_DEVICE_DATA=0"),
        ("jax", True, 2**20, 2**30, 1, "--device-data off", False, "", False, "turned off: --device-data off"),
        ("tensorflow", True, 2**20, 2**30, 1, "", False, "", False, "tensorflow: Keras's own input path"),
        ("jax", True, 2**20, 2**30, 1, "", True, "", False, "scans steps_per_execution itself"),
        ("jax", False, 0, 2**30, 1, "", False, "", False, "not in-memory arrays"),
        ("jax", True, 2**20, 2**30, 2, "", False, "", True, "each of 2 processes its own share on its devices, here "
         "500 samples: 1.0 MiB of 1.0 GiB"),
        ("jax", True, 2**20, 2**30, 2, "a model axis", False, "", False,
         "2 processes and a model axis: each feeds its share through Keras's input path"),
        ("jax", True, 2**29, 2**30, 2, "", False, "", False, "too large: each of 2 processes its own share"),
        ("jax", True, 2**20, 2**30, 1, "", False, "8 device(s)", False, "weights lie on 8 device(s), with no distribution"),
        ("jax", True, 2**20, None, 1, "", False, "", False, "memory is unknown"),
    ],
)
def test_choose_device_data(backend, arrays, nbytes, device, processes, off, keras_scans, elsewhere, expected, why):
    # In a job of several processes, `off` stands for what keeps it on Keras's input path (in_job_not)
    turned_off, in_job_not = (off, "") if processes == 1 else ("", off)
    on, reason = decisions.choose_device_data(backend, arrays, nbytes, device, processes, turned_off, keras_scans,
                                              weights_elsewhere=elsewhere, share_rows=500, in_job_not=in_job_not)
    assert on is expected and why in reason


def test_choose_device_data_in_a_job_says_when_each_process_holds_the_whole_set():
    on, reason = decisions.choose_device_data("jax", True, 2**20, 2**30, 2, "", share_rows=1001, whole_set=True)
    assert on and reason.startswith("each of 2 processes the whole set (a resumable epoch draws each batch from every "
                                    "sample) on its devices, here 1,001 samples: 1.0 MiB of 1.0 GiB, at most 25%")


@pytest.mark.parametrize(
    "steps_per_epoch, spe, hooked, keras_step, compiled, expected, why",
    [
        (1875, 1, (), True, True, 1875, "to the epoch's end"),
        (1875, 4, ("Counting",), True, True, 4, "Counting has a batch hook: steps_per_execution 4"),
        # Each class named once, and the verb agreeing (it said "ModelCheckpoint, ModelCheckpoint has")
        (1875, 1, ("ModelCheckpoint", "ModelCheckpoint"), True, True, 1, "(ModelCheckpoint has a batch hook"),
        (1875, 1, ("A", "B", "A"), True, True, 1, "(A, B have a batch hook"),
        # The model's own steps_per_execution replaced where no callback has a batch hook: said, with how to keep it
        (64, 4, (), True, True, 64, "to the epoch's end, about a second a dispatch; not the model's "
                                    "steps_per_execution=4, which says how often Keras calls batch hooks, and no "
                                    "callback has one. To keep 4: --device-data off"),
        (4, 4, (), True, True, 4, "to the epoch's end, about a second a dispatch)"),  # the same count: nothing to say
        (1875, 1, (), False, True, 1, "its own train_step"),
        (1875, 2, (), True, False, 2, "uncompiled"),
        (10**7, 1, (), True, True, 64 * 2**20 // 128, "capped by 64 MiB of indices"),
    ],
)
def test_choose_steps_per_dispatch(steps_per_epoch, spe, hooked, keras_step, compiled, expected, why):
    steps, reason = decisions.choose_steps_per_dispatch(steps_per_epoch, spe, hooked, keras_step, compiled, 32 * 4,
                                                        64 * 2**20)
    assert steps == expected and why in f"({reason})"


def test_steps_a_dispatch_aligned_to_the_checkpoint_loop_say_why_without_claiming_a_checkpoint_is_due():
    """`acceltrain train` said "a divisor of 2, so that executions start where checkpoints are due" while its 'auto'
    cadence timed steps 2 to 4 of its first epoch, with no checkpoint due within epochs."""
    steps, reason = decisions.choose_steps_per_dispatch(45, 1, (), True, True, 32 * 4, 64 * 2**20, live="the loop",
                                                        first_steps=16, steps_apart=2)
    assert steps == 2 and reason.endswith("a divisor of 2, so that executions start at the steps the checkpoint loop "
                                          "stops at (checkpoints due, or the steps its 'auto' cadence times)")



@pytest.mark.parametrize("steps_per_epoch, seconds_a_step, expected, why", [
    (1688, None, 16, "the checkpoint loop hears from each execution: about 1 s of steps (no step measured yet)"),
    (1688, 0.002, 500, "about 1 s of steps (2.00 ms a step measured)"),
    (300, 0.002, 300, "to the epoch's end"),  # the epoch is shorter than a second
    (10, None, 10, "to the epoch's end"),
    (1688, 5.0, 1, "(5,000.00 ms a step measured)"),  # a step over a second: one an execution
])
def test_choose_steps_per_dispatch_keeps_a_live_callback_called_about_each_second(steps_per_epoch, seconds_a_step,
                                                                                   expected, why):
    steps, reason = decisions.choose_steps_per_dispatch(steps_per_epoch, 1, (), True, True, 32 * 4, 64 * 2**20,
                                                        live="the checkpoint loop", seconds_a_step=seconds_a_step)
    assert steps == expected and why in reason


@pytest.mark.parametrize("platform, devices, one_program, why", [
    ("cpu", 1, True, "1 cpu device(s): the steps in one compiled loop"),  # the seed's job on this machine
    ("cpu", 8, False, "8 CPU devices: each step its own program"),  # simulated: collectives on a small pool
    ("gpu", 1, True, "1 gpu device(s): the steps in one compiled loop"),
    ("gpu", 8, True, "8 gpu device(s)"),
    ("tpu", 4, True, "4 tpu device(s)"),
])
def test_choose_step_loop(platform, devices, one_program, why):
    chosen, reason = decisions.choose_step_loop(platform, devices)
    assert chosen is one_program and why in reason


def test_the_platforms_steps_per_execution_is_capped_by_the_bytes_of_the_batches_it_stacks():
    """Keras 3.16 stacks steps_per_execution batches on the device: the platform's default (tpu: 32) keeps them
    within decisions.STACKED_BATCHES_SHARE of a device's memory; the user's own setting is left as asked."""
    gib = 2**30
    steps, reason = decisions.choose_steps_per_execution("tpu", 1000, 1, None, batch_bytes=gib // 10,
                                                         device_bytes=16 * gib)
    assert steps == int(decisions.STACKED_BATCHES_SHARE * 16 * gib // (gib // 10)) == 8 and "capped at 8" in reason
    assert decisions.choose_steps_per_execution("tpu", 1000, 1, None, batch_bytes=2**20, device_bytes=16 * gib)[0] == 32
    assert decisions.choose_steps_per_execution("tpu", 1000, 1, 64, batch_bytes=gib, device_bytes=16 * gib)[0] == 64
    assert decisions.choose_steps_per_execution("tpu", 1000, 1, None, batch_bytes=None, device_bytes=16 * gib)[0] == 32


@pytest.mark.parametrize("checkpoint_seconds, checkpoints, grace, reason", [
    (0.0, 0, 30, "no checkpoint measured → Kubernetes's default 30 s"),
    (1.5, 3, 30, "a checkpoint took 0.5 s (3 measured): 3 × it + 10 s = 12 s ≤ 30 s → Kubernetes's default"),
    (20.0, 3, 30, "a checkpoint took 6.7 s (3 measured): 3 × it + 10 s = 30 s ≤ 30 s → Kubernetes's default"),
    (21.0, 3, 31, "a checkpoint took 7.0 s (3 measured): 3 × it + 10 s = 31 s"),
    (120.0, 2, 190, "a checkpoint took 60.0 s (2 measured): 3 × it + 10 s = 190 s"),
])
def test_choose_grace(checkpoint_seconds, checkpoints, grace, reason):
    assert decisions.choose_grace(checkpoint_seconds, checkpoints) == (grace, reason)
