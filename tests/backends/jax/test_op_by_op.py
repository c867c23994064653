"""backends/jax/op_by_op.py: a step Keras would run op by op on several CPU devices is compiled where JAX can, else
run on one device, else (several processes) named before the inputs are split."""

import numpy as np
import pytest

from acceltrain import decisions
from tests.backends.jax import IMAGES, LABELS, _model


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


@pytest.mark.parametrize("by", ["model", "runtime"])
def test_on_several_cpu_devices_a_step_keras_would_run_op_by_op_is_compiled_when_jax_can(runtime, capsys, monkeypatch,
                                                                                           by):
    """The script's fit (the placement layer) and Runtime.fit (Keras's own method, no layer) alike."""
    import keras

    from acceltrain.backends.jax import steps

    monkeypatch.setattr(steps, "_told", set())
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

    from acceltrain.backends.jax import steps

    def eager_model():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"], run_eagerly=True)
        return model

    monkeypatch.setattr(steps, "_told", set())
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


def test_in_a_job_of_several_processes_a_step_only_one_device_can_run_is_named_before_the_inputs_are_split(
        runtime, monkeypatch):
    """op_by_op_in_processes: `launch`'s FitGuard runs such a call on one device in each process, on the whole inputs
    (placement, after the split, could only refuse it). A step JAX compiles, or a compiled one, stays distributed."""
    import jax
    import keras

    from acceltrain.backends import jax as backend

    with runtime.scope():
        eager = _augmenting_model(keras, keras.layers.RandomCrop(8, 8), run_eagerly=True)
        cropping = _augmenting_model(keras, keras.layers.RandomCrop(8, 8))
        plain = _model(keras)
    assert backend.op_by_op_in_processes(eager) is None  # one process: placement runs it on one device itself
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    assert backend.op_by_op_in_processes(eager) == ("run_eagerly=True, so Keras runs the step op by op; op by op on 8 "
                                                    "CPU devices, XLA's collectives can deadlock")
    assert backend.op_by_op_in_processes(cropping) is None and backend.op_by_op_in_processes(plain) is None
    from acceltrain.errors import UsageError

    with pytest.raises(UsageError, match=r"in a job of 2 processes the inputs are already split between them\. Run this "
                                         r"script in one process \(acceltrain run\)"):
        with backend.op_by_op_made_safe(eager, runtime.distribution):  # a dataset's, or Runtime.fit's: refused
            pass


@pytest.mark.parametrize("name", ["fit", "evaluate", "predict"])
def test_a_call_on_one_device_after_distributed_ones_runs_on_functions_made_for_one_device(runtime, name):
    """A fit's validation compiles the model's functions with the distribution's output shardings: an evaluate (or
    fit, or predict) run on one device after it (run's batch no replica count divides) reused them and raised
    'Received incompatible devices for jitted computation'. Inside on_one_device Keras makes its own again; after it
    the distributed ones are back, not compiled again."""
    import keras

    from acceltrain.backends import jax as backend

    x, y = IMAGES.reshape(64, -1)[:40, :8], LABELS[:40]
    with runtime.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, validation_data=(x, y))
    model.predict(x, batch_size=16, verbose=0)
    distributed = (model.train_function, model.test_function, model.predict_function)
    with backend.on_one_device(model):
        before = [w.copy() for w in model.get_weights()]
        call = {"fit": lambda: model.fit(x, y, batch_size=10, epochs=1, verbose=0, validation_data=(x, y)),
                "evaluate": lambda: model.evaluate(x, y, batch_size=10, verbose=0),
                "predict": lambda: model.predict(x, batch_size=10, verbose=0)}[name]
        done = call()
    plain = keras.models.clone_model(model)
    plain.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    plain.set_weights(before)
    if name == "fit":  # the optimizer's state differs from a fresh one's: that it trained, and validated
        assert np.isfinite(done.history["val_loss"]).all()
        assert not np.array_equal(model.get_weights()[0], before[0])
    elif name == "evaluate":
        np.testing.assert_allclose(done, plain.evaluate(x, y, batch_size=10, verbose=0), rtol=1e-6)
    else:
        np.testing.assert_allclose(done, plain.predict(x, batch_size=10, verbose=0), rtol=1e-6)
    assert (model.train_function, model.test_function, model.predict_function) == distributed
    assert model.layers[-1].kernel.value.sharding.mesh.size == 8  # laid out again over the devices after the call
