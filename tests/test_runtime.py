"""connect(), Runtime.scope() and Runtime.fit() for real, on 8 simulated CPU devices."""

import json

import numpy as np
import pytest

import acceltrain
from acceltrain.errors import UsageError

pytestmark = pytest.mark.multi_device


def _mlp(units=16, classes=4, features=8):
    import keras

    model = keras.Sequential([keras.Input((features,)), keras.layers.Dense(units, activation="relu"),
                              keras.layers.Dense(classes, activation="softmax")])
    model.compile(keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def _toy_data(n=512, features=8, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features))  # float64 on purpose: acceltrain casts it once
    y = (x[:, 0] > 0).astype(np.int64) + 2 * (x[:, 1] > 0)
    return x, y


def test_connect_finds_the_simulated_devices(runtime):
    assert (runtime.backend, runtime.platform) == ("jax", "cpu")
    assert runtime.num_devices == runtime.num_replicas == 8
    assert (runtime.num_processes, runtime.process_index) == (1, 0)
    assert runtime.distribution_name == "DataParallel"


def test_describe_is_json_and_str_is_one_line(runtime):
    described = json.loads(json.dumps(runtime.describe()))
    assert described["num_replicas"] == 8 and described["versions"]["keras"]
    assert set(described["decisions"]) == {"backend", "platform", "distribution", "processes", "precision"}
    assert "\n" not in str(runtime) and "8 replicas" in str(runtime)


def test_connect_builds_the_runtime_whole(monkeypatch):
    """Every attribute of a runtime is set by its constructor: connect() sets none after it, and changes none."""
    import copy

    made = {}
    init = acceltrain.Runtime.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.update({name: (value, copy.copy(value) if isinstance(value, dict) else None)
                     for name, value in vars(self).items()})

    monkeypatch.setattr(acceltrain.Runtime, "__init__", recording)
    with acceltrain.connect(simulate_devices=8, distribution="data", verbose=False) as runtime:  # a new one: options
        # no other test's open runtime was opened with
        assert set(vars(runtime)) == set(made)
        for name, value in vars(runtime).items():
            assert value is made[name][0], f"{name} was replaced after the constructor"
            if isinstance(value, dict):
                assert value == made[name][1], f"{name} was changed after the constructor"


def test_connect_prints_its_decision_with_the_reason(capsys):
    with acceltrain.connect(simulate_devices=8, stall_timeout=0):  # options no other open runtime has: a new one
        pass
    line = capsys.readouterr().err.strip()
    assert line.count("\n") == 0
    assert ("DataParallel over 8 replicas (backend: Keras was already loaded with it, from KERAS_BACKEND; 8 devices: "
            "each takes a slice of every batch); dtype policy float32; 1 process") in line  # where the backend came
    # from, too; issue 31: what the models compute in and in how many processes

def test_connect_distribution_none_uses_one_replica():
    single = acceltrain.connect(distribution="none", verbose=False)
    assert single.num_replicas == 1 and single.distribution is None
    assert single.split.num_replicas == 1


def test_the_split_the_input_path_reads_is_the_runtimes_as_it_stands(runtime):
    """inputs.prepare_* read a Split, not the runtime: its replicas under the distribution in force (none: one), the
    job's processes, the platform and the backend's batch facts."""
    split = runtime.split
    assert (split.num_replicas, split.num_processes, split.process_index, split.platform) == (8, 1, 0, "cpu")
    assert split.splits_uneven_batches is runtime.backend_module.SPLITS_UNEVEN_BATCHES is False
    assert split.join_shares is runtime.backend_module.join_shares
    assert split.static_shapes is False  # CPU devices: a batch of any size compiles


def test_simulate_devices_after_jax_started_with_another_count_is_an_error(runtime):
    with pytest.raises(UsageError, match=r"simulate_devices=4 was asked for after JAX had started with 8"):
        acceltrain.connect(simulate_devices=4)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_simulate_devices_must_be_at_least_one(bad):
    with pytest.raises(UsageError, match="Expected a whole number of at least 1"):
        acceltrain.connect(simulate_devices=bad)


@pytest.mark.parametrize("bad", ["10.0.0.1:1234", {"coordinator": "10.0.0.1:1234"}])
def test_cluster_must_be_a_cluster(bad):
    """The job's coordinator, count and index travel together in acceltrain.Cluster (connect takes at most 10
    parameters): anything else is refused naming the argument, before any framework starts."""
    with pytest.raises(UsageError, match=r"Received cluster=.*Valid: an acceltrain\.Cluster, e\.g\. acceltrain\.Cluster\("):
        acceltrain.connect(cluster=bad)


def test_a_cluster_given_in_part_names_what_is_missing():
    """Named as the Python fields a library user typed (`acceltrain run` names its flags: tests/test_cluster.py)."""
    with pytest.raises(UsageError, match=r"Received coordinator=10.0.0.1:1234 without num_processes and process_id\. "
                                         r".*e\.g\. acceltrain\.Cluster\(coordinator="):
        acceltrain.connect(cluster=acceltrain.Cluster(coordinator="10.0.0.1:1234"))


def test_scope_places_variables_over_all_devices(runtime):
    with runtime.scope():
        model = _mlp()
    kernel = model.layers[0].kernel.value
    assert len(kernel.sharding.device_set) == 8
    assert kernel.sharding.is_fully_replicated  # data parallel: every device holds all weights


def test_scope_restores_the_global_distribution_also_on_error(runtime):
    import keras

    assert keras.distribution.distribution() is None
    with pytest.raises(RuntimeError, match="boom"):
        with runtime.scope():
            assert keras.distribution.distribution() is runtime.distribution
            raise RuntimeError("boom")
    assert keras.distribution.distribution() is None


def test_a_distribution_the_caller_set_is_its_own_with_its_meshs_batch_split(runtime):
    """Runtime.as_called: under acceltrain's distribution (or none) the runtime itself; under one the caller made (a
    ModelParallel over batch 2 × model 4, a DataParallel of its own over the same devices as the runtime's), that one,
    its replicas its mesh's batch axis (issue 41)."""
    import keras

    assert runtime.as_called() is runtime and runtime.own_distribution() is None
    with runtime.scope():
        assert runtime.as_called() is runtime
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh((2, 4), ["batch", "model"], devices)
    for own, replicas, words in [
        (keras.distribution.ModelParallel(layout_map=keras.distribution.LayoutMap(mesh), batch_dim_name="batch"), 2,
         "the script's own ModelParallel (mesh batch 2 × model 4)"),
        (keras.distribution.DataParallel(devices=devices), 8, "the script's own DataParallel (mesh batch 8)"),
    ]:
        with runtime.scope(), own.scope():  # set inside acceltrain's, as a script under `acceltrain run` sets it
            called = runtime.as_called()
            assert runtime.own_distribution() is own and called.distribution is own
            assert (called.num_replicas, called.distribution_name) == (replicas, type(own).__name__)
            assert called.words == words
            assert called.num_processes == runtime.num_processes  # the rest is the runtime's
            with called.scope():
                assert keras.distribution.distribution() is own
        assert runtime.own_distribution() is None


class _RecordBatchSharding:
    """A layer that records how its input batch is laid out over devices when the step compiles."""

    def __new__(cls):
        import jax
        import keras

        class Record(keras.layers.Layer):
            seen = []

            def call(self, x):
                jax.debug.inspect_array_sharding(x, callback=lambda s: Record.seen.append(s))
                return x

        return Record()


def _model_with_recorder():
    import keras

    recorder = _RecordBatchSharding()
    model = keras.Sequential([keras.Input((8,)), recorder, keras.layers.Dense(4, activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy")
    return model, type(recorder)


def test_fit_splits_each_batch_over_the_replicas(runtime):
    with runtime.scope():
        model, recorder = _model_with_recorder()
    x, y = _toy_data(64)
    runtime.fit(model, x, y, batch_size=32, epochs=1, verbose=0)
    batch_sharding = recorder.seen[-1]
    assert len(batch_sharding.device_set) == 8 and not batch_sharding.is_fully_replicated
    assert batch_sharding.shard_shape((32, 8)) == (4, 8)  # 32 = 4 × 8 replicas


def test_plain_model_fit_on_a_model_built_in_scope_is_distributed(runtime):
    with runtime.scope():
        model, recorder = _model_with_recorder()
    x, y = _toy_data(64)
    model.fit(x.astype("float32"), y, batch_size=32, epochs=1, verbose=0)  # plain Keras, outside the scope
    assert recorder.seen[-1].shard_shape((32, 8)) == (4, 8)


def test_one_and_eight_devices_agree_on_the_loss(runtime):
    """Same seed, same data, same order: 8 replicas reduce in another order, so equal within float32 noise."""
    single = acceltrain.connect(distribution="none", verbose=False)
    x, y = _toy_data(512)
    losses = {}
    for name, rt in (("one", single), ("eight", runtime)):
        rt.seed(0)
        with rt.scope():
            model = _mlp()
        history = rt.fit(model, x, y, batch_size=64, epochs=3, shuffle=False, verbose=0)
        losses[name] = history.history["loss"]
    np.testing.assert_allclose(losses["eight"], losses["one"], rtol=1e-4)
    assert losses["one"][-1] < losses["one"][0]  # it trained


def test_fit_rejects_a_batch_that_does_not_divide(runtime):
    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(64)
    with pytest.raises(UsageError, match=r"batch_size=30.*8 replicas.*24 or 32"):
        runtime.fit(model, x, y, batch_size=30)


def test_fit_rejects_labels_outside_the_classes(runtime):
    with runtime.scope():
        model = _mlp(classes=4)
    x, _ = _toy_data(64)
    with pytest.raises(UsageError, match=r"labels from 0 to 6.*4 classes"):
        runtime.fit(model, x, np.arange(64) % 7, batch_size=32)


_EMPTY = r"Received x with 0 samples \(its arrays have no rows\)\. Expected at least one sample"
_NO_X = r"Received x=None\. Expected the inputs: numpy arrays"
_NOT_A_MODEL = r"Received model='my_model' \(of type str\)\. Expected a keras.Model, built inside runtime.scope\(\)"
def _history():
    import keras

    return keras.callbacks.History()


_OUTSIDE = (r"Received model '[a-z_0-9]+', whose variables lie on 1 device, on a runtime of 8 replicas "
            r"\(DataParallel\): a model built outside runtime.scope\(\) stays where it was made\. Build and compile")
# (the call on a compiled model and 64 samples, what it is refused with); what each said before: in the test's id
WRONG_CALLS = {
    "fit on no samples (zero-size array to reduction operation)":
        (lambda rt, m, x, y: rt.fit(m, x[:0], y[:0], batch_size=32), _EMPTY),
    "evaluate on no samples (the same)": (lambda rt, m, x, y: rt.evaluate(m, x[:0], y[:0], batch_size=32), _EMPTY),
    "predict on no samples (Keras's UnboundLocalError)": (lambda rt, m, x, y: rt.predict(m, x[:0]), _EMPTY),
    "fit x=None (list index out of range)": (lambda rt, m, x, y: rt.fit(m, None, y, batch_size=32), _NO_X),
    "evaluate x=None (Keras's ValueError on its call)": (lambda rt, m, x, y: rt.evaluate(m, None, y), _NO_X),
    "predict x=None (pop from an empty set)": (lambda rt, m, x, y: rt.predict(m, None), _NO_X),
    "fit on a str (said not compiled)": (lambda rt, m, x, y: rt.fit("my_model", x, y), _NOT_A_MODEL),
    "predict on a str (cannot create weak reference)": (lambda rt, m, x, y: rt.predict("my_model", x), _NOT_A_MODEL),
    "epochs='2' ('>' not supported)": (lambda rt, m, x, y: rt.fit(m, x, y, batch_size=32, epochs="2"),
                                       r"Received epochs='2'\. Expected a whole number of at least 0"),
    "epochs=-1 (no training, no word)": (lambda rt, m, x, y: rt.fit(m, x, y, batch_size=32, epochs=-1),
                                         r"Received epochs=-1\. Expected a whole number"),
    "validation_split=2 (zero-size array)": (lambda rt, m, x, y: rt.fit(m, x, y, batch_size=32, validation_split=2.0),
                                             r"Received validation_split=2.0\. Expected a fraction from 0 up to"),
    "seed(-1) (numpy's 'Seed must be between 0 and 2**32 - 1')": (
        lambda rt, m, x, y: rt.seed(-1), r"Received seed=-1\. Expected a whole number from 0 to 4294967295"),
    "seed('1') (numpy's TypeError)": (lambda rt, m, x, y: rt.seed("1"), r"Received seed='1'\. Expected a whole"),
    "fit on a model built outside scope() (JAX's incompatible devices)": (
        lambda rt, m, x, y: rt.fit(_mlp(), x, y, batch_size=32), _OUTSIDE),
    "evaluate on a model built outside scope() (the same)": (
        lambda rt, m, x, y: rt.evaluate(_mlp(), x, y, batch_size=32), _OUTSIDE),
    "predict on a model built outside scope() (the same)": (lambda rt, m, x, y: rt.predict(_mlp(), x), _OUTSIDE),
    "callbacks=[5] (vars() argument must have __dict__ attribute)": (
        lambda rt, m, x, y: rt.fit(m, x, y, batch_size=32, callbacks=[5]),
        r"Received callbacks: a list holding 5\. Expected a list of keras.callbacks.Callback objects"),
    "callbacks=History() ('History' object is not iterable)": (
        lambda rt, m, x, y: rt.evaluate(m, x, y, callbacks=_history()),
        r"Received callbacks=<keras.src.callbacks.history.History object.*\. Expected a list of keras.callbacks"),
    "build(a model, not its function) ('int' object is not callable)": (
        lambda rt, m, x, y: rt.build(7), r"Received build_model=7\. Expected a function that builds and returns"),
    "build(a function returning no model) (cannot create weak reference)": (
        lambda rt, m, x, y: rt.build(lambda: 42),
        r"Received build_model, which returned 42 \(of type int\)\. Expected a keras.Model"),
}


@pytest.mark.parametrize("case", WRONG_CALLS, ids=list(WRONG_CALLS))
def test_a_wrong_argument_to_runtimes_calls_is_refused_naming_it_and_the_model_still_trains(runtime, case):
    """Each said a numpy, Keras or JAX error naming neither the argument nor the fix (the test's id says which): now
    a UsageError in Keras's form, before the call reaches Keras; the model trains after it, as it did before."""
    call, message = WRONG_CALLS[case]
    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(64)
    with pytest.raises(UsageError, match=message):
        call(runtime, model, x, y)
    assert runtime.fit(model, x, y, batch_size=32, verbose=0).history["loss"]


def test_fit_rejects_an_uncompiled_model(runtime):
    import keras

    with runtime.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    with pytest.raises(UsageError, match="not compiled"):
        runtime.fit(model, *_toy_data(64), batch_size=32)


def test_fit_casts_float64_once_and_trims_an_indivisible_tail(runtime, capsys):
    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(100)  # 100 = 3 × 32 + 4: a last batch of 4 cannot split over 8
    history = runtime.fit(model, x, y, batch_size=32, epochs=1, verbose=0)
    assert "left out the last 4 training samples" in capsys.readouterr().err
    assert np.isfinite(history.history["loss"][0])


def test_fit_warns_when_the_platforms_steps_per_execution_replaces_the_models_and_keeps_one_asked_for(
        runtime, capsys, monkeypatch):
    from acceltrain.hardware import cpu

    monkeypatch.setattr(cpu, "STEPS_PER_EXECUTION", 2)  # as on a GPU or TPU, where the platform's is not 1
    x, y = _toy_data(128)
    with runtime.scope():
        replaced, kept = _mlp(), _mlp()
    runtime.fit(replaced, x, y, batch_size=32, epochs=1, verbose=0)
    assert replaced.steps_per_execution == 2
    assert "warning: steps_per_execution 2 on cpu, not the model's 1" in capsys.readouterr().err
    runtime.fit(kept, x, y, batch_size=32, epochs=1, verbose=0, steps_per_execution=1)
    assert kept.steps_per_execution == 1 and "warning" not in capsys.readouterr().err


def test_evaluate_counts_every_sample(runtime):
    """100 samples in batches of 32 over 8 replicas: the result equals plain Keras on one device."""
    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(100)
    distributed = runtime.evaluate(model, x, y, batch_size=32, verbose=0)
    one_device = _mlp()  # built outside any distribution
    one_device.set_weights(model.get_weights())
    expected = one_device.evaluate(x.astype("float32"), y, batch_size=32, verbose=0, return_dict=True)
    assert distributed["accuracy"] == pytest.approx(expected["accuracy"], abs=1e-6)
    assert distributed["loss"] == pytest.approx(expected["loss"], rel=1e-5)


def test_evaluate_takes_kerass_return_dict_as_keras_does(runtime):
    """`runtime.evaluate(model, x, y, return_dict=True)`, Keras's own argument, raised a TypeError (a newcomer's
    first try): a dict by default and with True; False gives Keras's list, in the same order."""
    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(100)
    as_dict = runtime.evaluate(model, x, y, batch_size=32, verbose=0, return_dict=True)
    assert runtime.evaluate(model, x, y, batch_size=32, verbose=0) == as_dict
    as_list = runtime.evaluate(model, x, y, batch_size=32, verbose=0, return_dict=False)
    assert isinstance(as_list, list) and as_list == [as_dict["loss"], as_dict["accuracy"]]


def test_an_open_runtime_reads_a_mirrored_keras_variable_as_a_number(runtime):
    """A library user's `int(model.optimizer.iterations)` after runtime.fit on TensorFlow's MirroredStrategy raised
    TypeError ('MirroredVariable'): every open runtime enters keras_internals.numbers_read_from_mirrored (a stand-in
    for TensorFlow's class here, whose process runs JAX)."""
    import numpy as np
    from keras.src.backend.common import variables

    mirrored = type("MirroredVariable", (), {"__module__": "tensorflow.python.distribute.values",
                                             "__array__": lambda self, dtype=None: np.asarray(85, dtype=dtype)})
    held = type("Held", (), {"ndim": 0, "value": mirrored(), "__array__": variables.Variable.__array__})()
    assert variables.Variable.__int__(held) == 85 and variables.Variable.__float__(held) == 85.0


def test_evaluate_without_a_batch_size_takes_kerass_default_as_model_evaluate_does(runtime):
    """`runtime.evaluate(model, x, y)` raised "Received batch_size=None"; model.evaluate batches 32 by default."""
    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(100)
    assert runtime.evaluate(model, x, y, verbose=0) == runtime.evaluate(model, x, y, batch_size=32, verbose=0)
    with pytest.raises(acceltrain.UsageError, match="Received batch_size=12, which does not divide over 8"):
        runtime.evaluate(model, x, y, batch_size=12, verbose=0)  # one given is still checked


def test_fit_without_a_batch_size_takes_kerass_default_as_model_fit_does(runtime):
    """`runtime.fit(model, x, y)` raised "Received batch_size=None"; model.fit batches 32 by default: the same
    history and weights as batch_size=32, on 8 replicas, with validation data and accuracy."""
    import keras

    x, y = _toy_data(200)
    runs = []
    for batch_size in (None, 32):
        keras.utils.set_random_seed(3)
        with runtime.scope():
            model = _mlp()
        history = runtime.fit(model, x, y, batch_size=batch_size, epochs=2, validation_data=(x[:40], y[:40]),
                              verbose=0).history
        runs.append((history, model.get_weights()))
    (history, weights), (history_32, weights_32) = runs
    assert history == history_32
    for a, b in zip(weights, weights_32):
        np.testing.assert_array_equal(a, b)


def test_fit_stops_a_diverged_run_with_the_likely_cause(runtime):
    import keras

    with runtime.scope():
        model = _mlp()
        model.compile(keras.optimizers.SGD(1e6), "sparse_categorical_crossentropy")
    x, y = _toy_data(256)
    with pytest.raises(acceltrain.TrainingDiverged, match=r"diverged at epoch \d+.*learning rate too high"):
        runtime.fit(model, x * 100, y, batch_size=64, epochs=20, verbose=0)


# --- predict: exactly the samples given, whatever the replicas --------------------------------------

@pytest.mark.parametrize("n, batch_size", [(3, None), (100, 32), (1, 8)])
def test_predict_returns_what_one_device_returns(runtime, n, batch_size):
    with runtime.scope():
        model = _mlp()
    x, _ = _toy_data(100)
    x = x[:n].astype("float32")
    one_device = _mlp()  # built outside any distribution
    one_device.set_weights(model.get_weights())
    expected = one_device.predict(x, batch_size=batch_size, verbose=0)
    got = runtime.predict(model, x, batch_size=batch_size, verbose=0)
    assert got.shape == expected.shape == (n, 4)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_predict_rejects_a_batch_that_does_not_divide(runtime):
    with runtime.scope():
        model = _mlp()
    with pytest.raises(UsageError, match=r"batch_size=12.*8 replicas.*8 or 16"):
        runtime.predict(model, np.zeros((3, 8), "float32"), batch_size=12)


# --- close(): what connect() changed in Keras is undone ---------------------------------------------

def test_close_undoes_placement_following_and_connect_again_adds_nothing(runtime):
    from acceltrain.backends import jax as jax_backend
    from acceltrain.backends import keras_internals
    from acceltrain.backends.jax import distribution

    JAXTrainer = keras_internals.trainer_class("jax")  # keras-nightly 3.16: named Trainer
    meshes = len(distribution._distributions_by_mesh)
    patched_fit = JAXTrainer.fit
    with acceltrain.connect(simulate_devices=8, distribution="data", verbose=False) as again:  # a second runtime
        assert again is not runtime and len(distribution._distributions_by_mesh) == meshes  # the same devices: the same entry
        with again.scope():
            model = _mlp()
    assert JAXTrainer.fit is patched_fit  # the session's runtime is still open: its models still follow
    assert jax_backend.distribution_of(model) is not None


def test_connect_again_with_the_same_options_gives_back_the_open_runtime_and_says_so(runtime, capsys):
    """A notebook cell run again (issue 41): the runtime it opened, not a second one beside it, as Keras's distribution
    and Accelerate's state are one per process; a `with` block's end gives back only its own hold, and close()
    closes it outright, after which connect() opens a new one."""
    from acceltrain import runtime as runtimes
    from acceltrain.backends import interception

    opened, seed = interception.runtimes_opened(), runtime.seeded
    with acceltrain.connect(simulate_devices=8) as again:  # the session runtime's options
        assert again is runtime and interception.runtimes_opened() == opened
    said = capsys.readouterr().err.strip()
    assert said.count("\n") == 0 and said.startswith(f"acceltrain: {runtime} (given back: connect() opened this "
                                                      "runtime earlier in this process with the same options")
    assert runtime in runtimes._open_runtimes and runtime.seeded == seed  # the block's end left it open: the session's

    fresh = acceltrain.connect(simulate_devices=8, precision="float32", verbose=False)  # not yet opened: a new one
    assert fresh is not runtime and acceltrain.connect(simulate_devices=8, precision="float32") is fresh
    fresh.close()  # outright: both connect() calls' holds
    assert fresh not in runtimes._open_runtimes
    newer = acceltrain.connect(simulate_devices=8, precision="float32", verbose=False)
    try:
        assert newer is not fresh and interception.runtimes_opened() == opened + 2
    finally:
        newer.close()


def test_a_scripts_close_of_the_runtime_run_holds_gives_back_its_own_hold_only(runtime, capsys):
    """A script under `acceltrain run` that calls connect() with run's options gets run's runtime back; its close()
    (once, twice, or its `with` block's end) gives back its own hold and leaves run's open; run's end closes it."""
    from acceltrain import opened
    from acceltrain import runtime as runtimes

    held = acceltrain.connect(simulate_devices=8, stall_timeout=7, verbose=False)  # run's, with options of its own
    with opened.held_by_command(held):
        scripts = acceltrain.connect(simulate_devices=8, stall_timeout=7, verbose=False)
        assert scripts is held and opened.HOLDS[held] == 2
        scripts.close()
        assert held in runtimes._open_runtimes and opened.HOLDS[held] == 1
        scripts.close()  # closed again: still run's
        with acceltrain.connect(simulate_devices=8, stall_timeout=7, verbose=False) as again:
            assert again is held
        assert held in runtimes._open_runtimes and opened.HOLDS[held] == 1
        with held.scope():
            model = _mlp()
        assert runtimes._runtime_of(model) is held  # its models still follow it
    assert held not in runtimes._open_runtimes  # run's end closed it
    said = capsys.readouterr().err
    assert said.count("runtime.close(): this runtime is acceltrain run's, given back to the script's connect(); run "
                      "holds it until the script ends, and closes it then") == 2
    assert acceltrain.connect(simulate_devices=8, stall_timeout=7, verbose=False) is not held  # a new one now
    acceltrain.connect(simulate_devices=8, stall_timeout=7, verbose=False).close()


def test_a_runtime_opened_beside_one_with_other_options_says_which_differ(runtime, capsys):
    """Options changed in the connect cell and run: a second runtime, said with what differs from the open one."""
    with acceltrain.connect(simulate_devices=8, distribution="fsdp") as other:
        assert other is not runtime
    line = capsys.readouterr().err.strip()
    beside = line.split("; opened beside ", 1)[1]  # and how many other tests left open before this one: not counted
    assert "runtime(s) connect() opened with other options, still open in this process (" in beside, line
    assert "distribution='auto' there, 'fsdp' here" in beside, line  # the session runtime's: what differs from it
    assert beside.endswith("); the models built in each one's scope keep its layout: runtime.close() the one you no "
                           "longer use"), line


def test_fit_trims_sample_weights_with_the_samples(runtime):
    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(100)  # trimmed to 96: the weights must follow
    history = runtime.fit(model, x, y, batch_size=32, sample_weight=np.ones(100), verbose=0)
    assert np.isfinite(history.history["loss"][0])


@pytest.mark.parametrize("arguments, named", [
    ({"checkpoint_every": "x"}, "checkpoint_every='x'"),
    ({"keep_checkpoints": 0}, "keep_checkpoints=0"),
    ({"batch_size": 0}, "batch_size=0"),
])
def test_library_errors_name_the_python_argument_not_the_flag(runtime, tmp_path, arguments, named):
    with runtime.scope():
        model = _mlp()
    x, y = _toy_data(64)
    with pytest.raises(UsageError) as raised:
        runtime.fit(model, x, y, **{"batch_size": 32, "checkpoint_dir": tmp_path, **arguments})
    assert named in str(raised.value) and "--" not in str(raised.value)


def test_runtime_build_gives_the_weights_keras_initializes_op_by_op_from_one_program(runtime):
    """Runtime.build's weights get their initial values from one program (13 compiled ops for the seed's MLP before,
    one an initializer and shape): the same arrays as the same build under the runtime's scope, op by op."""
    import jax
    import keras

    from acceltrain.backends.jax import compiles
    from acceltrain.recipes import mnist_mlp

    def build():
        return mnist_mlp.build_model(total_steps=10)

    names = []

    def span(event, start, end, fun_name=None, **_):
        if event == compiles.BACKEND_COMPILE:
            names.append(fun_name)

    built = []
    for how in ("runtime.build", "op by op"):
        runtime.seed(3)
        jax.monitoring.register_event_time_span_listener(span)
        try:
            if how == "runtime.build":
                built.append(runtime.build(build))
            else:
                with runtime.scope():
                    built.append(build())
        finally:
            jax.monitoring.unregister_event_time_span_listener(span)
        if how == "runtime.build":
            assert names.count("jit(initial_values)") == 1 and not any("uniform" in name for name in names), names
    for ours, keras_own in zip(*(model.get_weights() for model in built)):
        np.testing.assert_array_equal(ours, keras_own)
    assert len(built[0].weights) == len(built[1].weights) == 10 and keras.backend.backend() == "jax"
