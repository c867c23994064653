"""backends/jax.py: on several CPU devices Keras runs one step at a time (XLA's CPU collectives deadlock
when steps overlap; see _steps_must_not_overlap)."""

import threading

import numpy as np
import pytest

from acceltrain import decisions


def _model(keras):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy")
    return model


def _threads_of_batch_ends(keras, model, call, runtime=None):
    """The threads Keras called on_*_batch_end from, for a callback as free to run async as Keras allows."""
    threads = set()

    class Where(keras.callbacks.Callback):
        async_safe = True

        def on_train_batch_end(self, batch, logs=None):
            threads.add(threading.current_thread())

        on_test_batch_end = on_predict_batch_end = on_train_batch_end

    x = np.random.default_rng(0).random((256, 8), dtype=np.float32)
    y = (x.sum(axis=1) > 4).astype("int32")
    if runtime is not None:  # Runtime's own call: Keras's own method, which passes no layer
        getattr(runtime, call)(model, x, y, batch_size=64, verbose=0, callbacks=[Where()])
    elif call == "fit":
        model.fit(x, y, batch_size=64, epochs=1, verbose=0, callbacks=[Where()])
    else:
        model.evaluate(x, y, batch_size=64, verbose=0, callbacks=[Where()])
    return threads


@pytest.mark.parametrize("call", ["fit", "evaluate"])
@pytest.mark.parametrize("by", ["model", "runtime"])
def test_on_several_cpu_devices_each_step_ends_before_the_next_starts(runtime, call, by):
    import keras

    with runtime.scope():
        distributed = _model(keras)
    through = runtime if by == "runtime" else None
    assert _threads_of_batch_ends(keras, distributed, call, through) == {threading.main_thread()}
    # The control: the same model outside any acceltrain distribution, as Keras dispatches it by itself.
    assert threading.main_thread() not in _threads_of_batch_ends(keras, _model(keras), call)


def test_the_rule_is_several_cpu_devices(runtime):
    from acceltrain.backends import jax as backend

    assert backend._steps_must_not_overlap(runtime.distribution)  # 8 simulated CPU devices
    one = backend.make_distribution("data", runtime.hardware.devices[:1])
    assert not backend._steps_must_not_overlap(one)


def test_watch_compiles_books_jaxs_own_compile_events_and_the_caches(runtime):
    """The event names of JAX 0.10.2 (backends/jax.py COMPILE_SPANS, CACHE_EVENTS) still fire: a function never
    compiled before is traced, lowered and compiled (compilation), the persistent cache asked and missed; the same
    program again, in a new function, is found in it."""
    import uuid

    import jax

    from acceltrain import ledger
    from acceltrain.backends import jax as backend

    assert jax.config.jax_compilation_cache_dir  # connect() turned the persistent cache on
    constant = float(uuid.uuid4().int % 10**9)  # a program no earlier run compiled
    timeline = ledger.Timeline(backend.watch_compiles)
    with timeline.window() as cold:
        jax.jit(lambda x: x * constant + 1)(np.ones(3, np.float32)).block_until_ready()
    with timeline.window() as warm:
        jax.jit(lambda x: x * constant + 1)(np.ones(3, np.float32)).block_until_ready()
    assert cold.ledger.parts["compilation"] > 0 and cold.ledger.facts["compiles"] >= 1
    assert cold.ledger.facts["cache_requests"] >= 1 and cold.ledger.facts["compile_seconds_missed"] > 0
    assert warm.ledger.facts.get("cache_hits", 0) >= 1 and not warm.ledger.facts.get("compile_seconds_missed")
    with timeline.window() as stopped:  # the listeners went with the windows: one watch at a time, not one a window
        pass
    assert stopped.ledger.facts == {}


@pytest.mark.parametrize("name", decisions.COMPILABLE_ON_JAX)
def test_the_layers_keras_does_not_compile_but_jax_does_give_their_eager_output_compiled(name):
    """decisions.COMPILABLE_ON_JAX: each of these layers, compiled on JAX in training, draws and transforms as
    it does op by op (RandomCrop once keras_internals.jittable_random_crop cuts it with a dynamic slice)."""
    import jax
    import keras

    from acceltrain.backends import keras_internals

    arguments = {"RandomCrop": (6, 7), "RandomTranslation": (0.3, 0.3), "RandomPerspective": ()}.get(name, (0.3,))
    eager, compiled = (getattr(keras.layers, name)(*arguments, seed=3) for _ in range(2))
    assert not eager.supports_jit  # else Keras compiles it by itself: drop it from the list
    if name == "RandomCrop":
        keras_internals.jittable_random_crop(compiled)
    images = np.random.default_rng(0).random((4, 10, 12, 3), dtype=np.float32)
    compiled.build(images.shape)
    state = [v.value for v in compiled.non_trainable_variables]
    step = jax.jit(lambda state, x: compiled.stateless_call([], state, x, training=True))
    for _ in range(2):
        transformed, state = step(state, images)
        np.testing.assert_allclose(transformed, eager(images, training=True), atol=1e-5)


def _augmenting_model(keras, layer, run_eagerly=False):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((10, 10, 1)), layer, keras.layers.Conv2D(4, 3),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", run_eagerly=run_eagerly)
    return model


IMAGES = np.random.default_rng(0).random((64, 10, 10, 1), dtype=np.float32)
LABELS = (IMAGES.mean(axis=(1, 2, 3)) > 0.5).astype("int32")


@pytest.mark.parametrize("by", ["model", "runtime"])
def test_on_several_cpu_devices_a_step_keras_would_run_op_by_op_is_compiled_when_jax_can(runtime, capsys, monkeypatch,
                                                                                           by):
    """The script's fit (the placement layer) and Runtime.fit (Keras's own method, no layer) alike."""
    import keras

    from acceltrain.backends import jax as backend

    monkeypatch.setattr(backend, "_told", set())
    with runtime.scope():
        model = _augmenting_model(keras, keras.layers.RandomCrop(8, 8))
    assert not model.jit_compile  # Keras's own choice
    if by == "model":
        history = model.fit(IMAGES, LABELS, batch_size=16, epochs=1, verbose=0)
    else:
        history = runtime.fit(model, IMAGES, LABELS, batch_size=16, epochs=1, verbose=0)
    assert model.jit_compile and np.isfinite(history.history["loss"]).all()
    assert model.layers[-1].kernel.value.sharding.mesh.size == 8  # it trained distributed
    err = capsys.readouterr().err
    assert err.count("compiling the model's step (jit_compile=True): Keras marks RandomCrop as not compilable") == 1


def test_on_several_cpu_devices_an_eager_step_runs_on_one_device_with_the_same_math(runtime, capsys, monkeypatch):
    import keras

    from acceltrain.backends import jax as backend

    def eager_model():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"], run_eagerly=True)
        return model

    monkeypatch.setattr(backend, "_told", set())
    x, y = IMAGES.reshape(64, -1)[:32, :8], LABELS[:32]
    alone = eager_model()  # no distribution at all
    alone.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    with runtime.scope():
        model = eager_model()
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    assert "running on one device, on the whole global batch: run_eagerly=True" in capsys.readouterr().err
    for trained, expected in zip(model.get_weights(), alone.get_weights()):
        np.testing.assert_allclose(trained, expected, rtol=1e-6)
    assert model.layers[-1].kernel.value.sharding.mesh.size == 8  # laid out again over the devices after the call


def test_a_fit_on_several_cpu_devices_is_timed_once_against_one_device_and_said(runtime, capsys, monkeypatch):
    """Issue 22 item 5. The thresholds are lowered so a tiny model is measured and said whatever its ratio (the
    ratio's rule is decisions.slower_on_several_devices's table); it is measured once a process."""
    import keras

    from acceltrain.backends import jax as backend

    monkeypatch.setattr(backend, "_told", set())
    monkeypatch.setattr(backend, "COMPARE_AFTER_STEPS", 5)
    monkeypatch.setattr(backend, "COMPARE_FROM_STEP_SECONDS", 0.0)
    monkeypatch.setattr(decisions, "SLOWER_WORTH_SAYING", 0.0)
    with runtime.scope():
        model = _model(keras)
    x, y = IMAGES.reshape(64, -1)[:, :8], LABELS
    for _ in range(2):
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    said = [line for line in capsys.readouterr().err.splitlines() if "the same step took on one device" in line]
    assert len(said) == 1 and said[0].startswith("acceltrain: 8 CPU devices: a training step takes "), said
    assert "(measured once: 5 steps of a copy of the state on one device, after " in said[0]
    from acceltrain.backends import keras_internals

    assert keras_internals.train_function_wrappers(model) == 0  # Keras's own train function given back


def test_a_fit_that_is_not_many_times_slower_says_nothing(runtime, capsys, monkeypatch):
    import keras

    from acceltrain.backends import jax as backend

    monkeypatch.setattr(backend, "_told", set())
    monkeypatch.setattr(backend, "COMPARE_AFTER_STEPS", 5)
    monkeypatch.setattr(backend, "COMPARE_FROM_STEP_SECONDS", 0.0)
    monkeypatch.setattr(decisions, "SLOWER_WORTH_SAYING", 1e9)
    measured = []
    monkeypatch.setattr(decisions, "slower_on_several_devices",
                        lambda *args, **kwargs: measured.append(args) or None)
    with runtime.scope():
        model = _model(keras)
    model.fit(IMAGES.reshape(64, -1)[:, :8], LABELS, batch_size=8, epochs=1, verbose=0)
    assert len(measured) == 1 and measured[0][0] == 8 and measured[0][4] == backend.COMPARE_STEPS
    assert "the same step took on one device" not in capsys.readouterr().err


def test_in_a_job_of_several_processes_a_step_only_one_device_can_run_is_named_before_the_inputs_are_split(
        runtime, monkeypatch):
    """op_by_op_in_processes: `launch`'s FitGuard runs such a call on one device in each process, on the whole inputs
    (placement, after the split, could only refuse it). A step JAX compiles, or a compiled one, stays distributed."""
    import keras

    from acceltrain.backends import jax as backend

    with runtime.scope():
        eager = _augmenting_model(keras, keras.layers.RandomCrop(8, 8), run_eagerly=True)
        cropping = _augmenting_model(keras, keras.layers.RandomCrop(8, 8))
        plain = _model(keras)
    assert backend.op_by_op_in_processes(eager) is None  # one process: placement runs it on one device itself
    monkeypatch.setattr(backend.jax, "process_count", lambda: 2)
    assert backend.op_by_op_in_processes(eager) == ("run_eagerly=True, so Keras runs the step op by op; op by op on 8 "
                                                    "CPU devices, XLA's collectives can deadlock")
    assert backend.op_by_op_in_processes(cropping) is None and backend.op_by_op_in_processes(plain) is None
    from acceltrain.errors import UsageError

    with pytest.raises(UsageError, match=r"in a job of 2 processes the inputs are already split between them\. Run this "
                                         r"script in one process \(acceltrain run\)"):
        with backend.op_by_op_made_safe(eager, runtime.distribution):  # a dataset's, or Runtime.fit's: refused
            pass


def test_the_cache_is_said_off_only_by_the_setting_that_turned_it_off(monkeypatch):
    """The ledger advises undoing a setting only where the backend noted one (issue 31: it advised unsetting an
    ACCELTRAIN_COMPILATION_CACHE=0 nobody had set)."""
    import jax

    from acceltrain.backends import jax as jax_backend

    monkeypatch.delenv("ACCELTRAIN_COMPILATION_CACHE", raising=False)
    assert jax_backend._cache_off_by() is None  # on, or off by nothing the user set: nothing to undo
    was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        assert jax_backend._cache_off_by() == "jax_enable_compilation_cache=False"
    finally:
        jax.config.update("jax_enable_compilation_cache", was)
    monkeypatch.setenv("ACCELTRAIN_COMPILATION_CACHE", "0")  # enable_compilation_cache then sets no folder
    folder = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", None)
    try:
        assert jax_backend._cache_off_by() == "ACCELTRAIN_COMPILATION_CACHE=0"
    finally:
        jax.config.update("jax_compilation_cache_dir", folder)


def test_the_one_device_copy_takes_what_this_process_holds_whole(runtime):
    """_here_whole: an array this process holds (all of it, or replicated) as it is; the multi-process path (rows
    here, repeated to the global shape) is run under launch by the slow test of tests/commands/test_launch.py."""
    import jax

    from acceltrain.backends import jax as backend

    local = jax.numpy.arange(6.0).reshape(3, 2)
    assert backend._here_whole(local) is local
    assert backend._here_whole(np.ones(3)).shape == (3,)
