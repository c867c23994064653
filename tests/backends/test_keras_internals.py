"""Each of Keras's private names acceltrain relies on (backends/keras_internals/) still exists and still
behaves as assumed: a Keras upgrade that changes one fails the test named after it."""

import numpy as np
import pytest

from acceltrain.backends import keras_internals


def _model():
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    return model


def test_set_keras_seed_global_state_names_seed_keras_draws():
    """global_state's GLOBAL_RANDOM_SEED (read by keras.utils.get_random_seed) and GLOBAL_SEED_GENERATOR
    (dropped: the next unseeded draw makes a new generator from Python's random, which set_seed seeds)."""
    import random

    import keras
    from keras.src.backend.common import global_state
    from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR
    from keras.src.utils import rng_utils

    kernels = []
    for _ in range(2):
        keras_internals.set_keras_seed(7)
        assert rng_utils.get_random_seed() == 7
        assert global_state.get_global_attribute(GLOBAL_SEED_GENERATOR) is None
        random.seed(7)
        layer = keras.layers.Dense(3)
        layer.build((None, 4))
        kernels.append(np.asarray(layer.kernel.value))
    np.testing.assert_array_equal(kernels[0], kernels[1])


def test_keras_state_kept_object_name_uids_and_seed_generator_undo_a_probe_build():
    """global_state's "object_name_uids" (layer auto-names) and GLOBAL_SEED_GENERATOR, and Python's and
    NumPy's random states, restored: what is built after a probe is named and drawn as without it."""
    import random

    import keras

    def build():
        layer = keras.layers.Dense(2)
        return layer.name, np.asarray(keras.random.uniform((3,))), random.random(), np.random.rand()

    keras_internals.set_keras_seed(3)
    random.seed(3)
    np.random.seed(3)
    with keras_internals.keras_state_kept():
        probe = build()
    after_probe = build()
    assert after_probe[0] == probe[0]
    for got, expected in zip(after_probe[1:], probe[1:]):
        np.testing.assert_array_equal(got, expected)
    assert build()[0] != after_probe[0]  # outside the context the name counter moves: the test can fail


def test_trainer_class_is_where_every_models_fit_comes_from():
    import keras
    from keras.src.backend.jax import trainer

    JAXTrainer = getattr(trainer, "JAXTrainer", None) or trainer.Trainer  # keras-nightly 3.16: Trainer

    assert keras_internals.trainer_class("jax") is JAXTrainer and issubclass(keras.Model, JAXTrainer)
    for name in ("fit", "evaluate", "predict"):
        assert getattr(keras.Model, name) is getattr(JAXTrainer, name)


def test_forget_compiled_functions_makes_keras_rebuild_them():
    model = _model()
    x = np.zeros((8, 3), "float32")
    model.predict(x, verbose=0)
    built = model.predict_function
    assert built is not None
    keras_internals.forget_compiled_functions(model)
    assert model.train_function is model.test_function is model.predict_function is None
    model.predict(x, verbose=0)
    assert model.predict_function is not None and model.predict_function is not built


def test_functions_made_anew_inside_and_the_kept_ones_back_after():
    model = _model()
    x = np.zeros((8, 3), "float32")
    model.fit(x, np.zeros((8, 2), "float32"), verbose=0, validation_data=(x, np.zeros((8, 2), "float32")))
    model.predict(x, verbose=0)
    kept = model.train_function, model.test_function, model.predict_function
    assert None not in kept
    with keras_internals.functions_made_anew(model):
        assert model.train_function is model.test_function is model.predict_function is None
        model.predict(x, verbose=0)
        assert model.predict_function is not None and model.predict_function is not kept[2]
    assert (model.train_function, model.test_function, model.predict_function) == kept
    model.evaluate(x, np.zeros((8, 2), "float32"), verbose=0)
    assert model.test_function is kept[1]  # make_test_function keeps it: not compiled again


def test_gathering_predictions_sees_each_steps_outputs_and_is_undone():
    model = _model()
    seen = []

    def gather(outputs):
        seen.append(np.asarray(outputs).shape)
        return np.asarray(outputs) * 0 + 5

    with keras_internals.gathering_predictions(model, gather):
        outputs = model.predict(np.zeros((6, 3), "float32"), batch_size=4, verbose=0)
    assert seen == [(4, 2), (2, 2)]  # predict_function(state, iterator) → (outputs, state), once a step
    np.testing.assert_array_equal(outputs, np.full((6, 2), 5))
    assert np.all(model.predict(np.zeros((2, 3), "float32"), verbose=0) != 5)


def test_async_safe_is_what_keras_reads_to_dispatch_callbacks_on_its_thread():
    import keras
    from keras.src.callbacks.callback_list import CallbackList

    class PerStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            pass

    safe = keras_internals.async_safe(type("SafePerStep", (PerStep,), {}))
    assert safe.async_safe is True
    # CallbackList._configure_async_dispatch: a per-step callback makes Keras wait, unless async_safe.
    assert CallbackList([PerStep()], model=_model())._async_train is False
    assert CallbackList([safe()], model=_model())._async_train is True


def test_callbacks_added_keeps_a_callback_list_as_keras_uses_one_given_to_fit():
    """Keras's fit uses a CallbackList it is given as it is (no set_model, no set_params: its maker's), its callbacks
    in `callbacks` and its parameters in `params`; callbacks_added makes a new one over them with acceltrain's, Keras's
    dispatch on its thread decided over all (a per-step callback of acceltrain's makes Keras wait, as in a list)."""
    import keras
    from keras.src.callbacks.callback_list import CallbackList

    class PerStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            pass

    model, heard = _model(), []
    mine = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: heard.append(epoch))
    given = CallbackList([mine], add_history=True, model=model, epochs=5)  # its maker's parameters, not the fit's
    model.fit(np.ones((4, 3), "float32"), np.ones((4, 2), "float32"), epochs=2, verbose=0, callbacks=given)
    assert heard == [0, 1] and mine.params == {"epochs": 5} and given.params == {"epochs": 5}
    assert [type(c).__name__ for c in given.callbacks] == ["LambdaCallback", "History"]  # no progress bar added
    assert CallbackList([mine], model=model)._async_train is True
    joined = keras_internals.callbacks_added(given, model, first=[PerStep()])
    assert joined._async_train is False and joined.callbacks[1:] == given.callbacks
    assert joined.callbacks[0]._model is model and joined.callbacks[0].params == {"epochs": 5}
    assert joined._history is given.callbacks[1] and model.history is given.callbacks[1]
    assert keras_internals.callbacks_added([mine], model, last=[PerStep()])[0] is mine
    assert keras_internals.callbacks_added(type("Own", (CallbackList,), {})([mine]), model, first=[PerStep()]) is None
    assert keras_internals.callbacks_in(given) == given.callbacks and keras_internals.callbacks_in(None) == []


def test_watch_train_steps_sees_each_executions_next_and_unwatch_gives_the_function_back():
    """JAXTrainer.fit makes its train function before on_epoch_begin and keeps one that exists; each execution is
    train_function(state, iterator), whose steps pull their batches with next(iterator) inside it."""
    import keras

    pulled = []

    class Pulling:
        def __init__(self, iterator):
            self.iterator = iterator

        def __next__(self):
            batch = next(self.iterator)
            pulled.append(np.shape(batch[0]))
            return batch

    class Watch(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            assert keras_internals.watch_train_steps(self.model, lambda state, iterator: Pulling(iterator))

    model = _model()
    keras_internals.keras_method(model, "fit")(  # Keras's own, whatever runtime is open (its layers keep data on device)
        np.zeros((10, 3), "float32"), np.zeros((10, 2), "float32"), batch_size=4, epochs=2, verbose=0,
        callbacks=[Watch()])
    assert pulled == [(4, 3), (4, 3), (2, 3)] * 2  # one next() an execution, in the train function's call
    assert keras_internals.train_function_wrappers(model) == 1
    keras_internals.unwatch_train_steps(model)
    assert keras_internals.train_function_wrappers(model) == 0


def test_jitted_train_step_is_the_step_keras_compiled_and_its_flops_are_counted():
    """JAXTrainer.make_train_function's train_function closes over `step_function`, the jitted train step."""
    from acceltrain.backends import jax as jax_backend

    model = _model()
    x, y = np.zeros((8, 3), "float32"), np.zeros((8, 2), "float32")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    step = keras_internals.jitted_train_step(model)
    assert step is not None and hasattr(step, "lower")
    state = jax_backend.shapes_of(([v.value for v in model.trainable_variables],
                                   [v.value for v in model.non_trainable_variables],
                                   [v.value for v in model.optimizer.variables],
                                   [v.value for v in model.metrics_variables]))
    flops = jax_backend.step_flops(step, (state, jax_backend.shapes_of((x, y))))
    assert flops >= 8 * 2 * 3 * 2 * 2  # forward and the kernel's gradient of the 3 × 2 matmul, at the least


def test_saving_without_tensorflow_reads_it_as_absent_only_where_the_process_has_not_imported_it(tmp_path,
                                                                                                 monkeypatch):
    """serialization_lib asks module_utils.tensorflow.available, which imports TensorFlow on its first read."""
    import sys

    from keras.src.saving import serialization_lib
    from keras.src.utils import module_utils

    lazy = module_utils.tensorflow
    assert serialization_lib.tf is lazy and isinstance(lazy._available, (bool, type(None)))
    monkeypatch.setattr(lazy, "_available", None)
    monkeypatch.setattr(lazy, "module", None)
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)  # as in a JAX process that never imported it
    imported = []
    monkeypatch.setattr(lazy, "initialize", lambda: imported.append("tensorflow"))
    with keras_internals.saving_without_tensorflow():
        assert lazy.available is False
        _model().save(tmp_path / "model.keras")
    assert imported == [] and lazy._available is None  # asked later, Keras imports it as it would have
    monkeypatch.setitem(sys.modules, "tensorflow", object())  # imported already: Keras's own answer stands
    with keras_internals.saving_without_tensorflow():
        assert lazy._available is None


def test_saving_replaced_covers_save_and_save_weights(tmp_path):
    import keras

    calls = []
    with keras_internals.saving_replaced(lambda name, method: lambda model, *a, **k: calls.append(name)):
        _model().save(tmp_path / "m.keras")
        _model().save_weights(tmp_path / "m.weights.h5")
    assert calls == ["save", "save_weights"] and not list(tmp_path.iterdir())
    assert keras.Model.save.__name__ == "save"


def test_variable_values_and_put_back_values_rely_on_variable__value(runtime):
    import keras
    import numpy as np

    from acceltrain.backends import keras_internals

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    expected = model.predict(np.ones((8, 4), "float32"), verbose=0)
    values = keras_internals.variable_values(model)  # as a call starts (a finished call hands its inputs' buffers over)
    for variable, _ in values:
        variable._value = None  # as Keras's JAX trainer leaves them when its call raises

    assert keras_internals.put_back_values(values)
    np.testing.assert_array_equal(model.predict(np.ones((8, 4), "float32"), verbose=0), expected)
    values[0][1].delete()  # a step ran: the value was handed over (donated) and is gone
    assert not keras_internals.put_back_values(values)


def test_layers_not_jitted_is_what_keras_reads_to_compile_the_step():
    import keras
    from keras.src.trainers.trainer import model_supports_jit

    augment = keras.Sequential([keras.layers.RandomCrop(6, 6), keras.layers.RandomFlip()])  # nested
    model = keras.Sequential([keras.Input((8, 8, 1)), augment, keras.layers.Flatten(), keras.layers.Dense(2)])
    assert [type(layer).__name__ for layer in keras_internals.layers_not_jitted(model)] == ["RandomCrop"]
    assert not model_supports_jit(model)
    for layer in keras_internals.layers_not_jitted(model):
        layer.supports_jit = True
    assert model_supports_jit(model)


def test_jittable_random_crop_cuts_the_same_pixels_compiled():
    import jax
    import keras

    images = np.random.default_rng(0).random((4, 10, 12, 3), dtype=np.float32)
    eager, compiled = keras.layers.RandomCrop(6, 7, seed=5), keras.layers.RandomCrop(6, 7, seed=5)
    keras_internals.jittable_random_crop(compiled)
    assert compiled.supports_jit
    compiled.build(images.shape)
    state = [v.value for v in compiled.non_trainable_variables]  # its seed generator's
    eager.build(images.shape)
    with pytest.raises(IndexError):  # the control: Keras's own RandomCrop does not compile
        jax.jit(lambda state, x: eager.stateless_call([], state, x, training=True))(state, images)
    step = jax.jit(lambda state, x: compiled.stateless_call([], state, x, training=True))
    for _ in range(3):  # each call draws new offsets from the seed generator, alike in both
        cropped, state = step(state, images)
        np.testing.assert_array_equal(cropped, eager(images, training=True))
    np.testing.assert_array_equal(compiled(images, training=False), eager(images, training=False))


def test_variables_on_one_device_moves_every_variable_and_lays_it_out_again(runtime):
    """Every variable, the optimizer's and the metrics' too (state_variables); one a call makes inside (fit builds
    the optimizer at its first call) is laid out by the distribution on exit."""
    import jax
    import keras

    with runtime.scope():
        model = _model()
        model.compile("adam", "mse", metrics=["mae"])
    first = jax.local_devices()[0]
    replicated = model.layers[0].kernel.value.sharding
    with keras_internals.variables_on_one_device(model, first, runtime.distribution.get_variable_layout):
        keras.distribution.set_distribution(None)
        try:
            model.fit(np.ones((16, 3), "float32"), np.ones((16, 2), "float32"), verbose=0)  # builds the optimizer
            everything = keras_internals.state_variables(model)
            assert len(everything) > len(model.variables) and all(v.value.devices() == {first} for v in everything)
            model.layers[0].kernel.assign(np.zeros((3, 2), "float32"))
            assert model.layers[0].kernel.value.devices() == {first}  # a new value stays where it is
        finally:
            keras.distribution.set_distribution(None)
    assert all(v.value.sharding == replicated or v.value.sharding.is_equivalent_to(replicated, len(v.shape))
               for v in keras_internals.state_variables(model))
    assert len(model.optimizer.variables[0].value.sharding.device_set) == 8  # made inside, laid out on exit
    np.testing.assert_array_equal(model.layers[0].kernel.numpy(), 0)


def _at_batch_end(read):
    """A fit of a small model whose callback calls `read(model)` at its first batch's end; what it returned."""
    import keras

    seen = []

    class Reads(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.kept = keras_internals.keep_last_batch(self.model)

        def on_train_batch_end(self, batch, logs=None):
            if not seen:
                seen.append(read(self.model, self.kept))

    model = _model()
    model.fit(np.ones((16, 3), "float32"), np.ones((16, 2), "float32"), batch_size=8, verbose=0, callbacks=[Reads()])
    return model, seen[0]


def test_training_state_is_what_the_jax_train_step_takes():
    import jax

    def step_again(model, kept):
        state = keras_internals.training_state(model)
        assert [len(part) for part in state] == [len(model.trainable_variables), len(model.non_trainable_variables),
                                                 len(model.optimizer.variables), len(model.metrics_variables)]
        logs, new_state = jax.jit(model.train_step)(state, kept["batch"])
        return float(logs["loss"])

    _, loss = _at_batch_end(step_again)
    assert np.isfinite(loss)


def test_keep_last_batch_keeps_the_batch_the_train_function_took_and_gives_it_back():
    def batch_and_stop(model, kept):
        x, y = kept["batch"][:2]
        kept["stop"]()
        return x.shape, y.shape, keras_internals.train_function_wrappers(model)

    model, (x_shape, y_shape, wrappers) = _at_batch_end(batch_and_stop)
    assert (tuple(x_shape), tuple(y_shape)) == ((8, 3), (8, 2))
    assert wrappers == 0 and keras_internals.train_function_wrappers(model) == 0


def test_the_ledgers_watch_and_the_kept_batch_share_the_train_functions_one_door():
    """Both hooks at once (a fit on several CPU devices under the ledger): one wrapper over Keras's train function,
    each hook seeing every batch; each stops alone, and the last gives Keras's own back. Two stacked wrappers broke
    once (the ledger read the FLOPs of the wrong one)."""
    import keras

    pulled, seen = [], []

    class Pulling:
        def __init__(self, iterator):
            self.iterator = iterator

        def __next__(self):
            batch = next(self.iterator)
            pulled.append(np.shape(batch[0]))
            return batch

    class Both(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.kept = keras_internals.keep_last_batch(self.model)

        def on_epoch_begin(self, epoch, logs=None):
            assert keras_internals.watch_train_steps(self.model, lambda state, iterator: Pulling(iterator))

        def on_train_batch_end(self, batch, logs=None):
            seen.append((keras_internals.train_function_wrappers(self.model), tuple(self.kept["batch"][0].shape)))

        def on_train_end(self, logs=None):
            self.kept["stop"]()
            seen.append(keras_internals.train_function_wrappers(self.model))

    model = _model()
    model.fit(np.zeros((10, 3), "float32"), np.zeros((10, 2), "float32"), batch_size=4, epochs=2, verbose=0,
              callbacks=[Both()])
    assert seen == [(1, (4, 3)), (1, (4, 3)), (1, (2, 3))] * 2 + [1]
    assert pulled == [(4, 3), (4, 3), (2, 3)] * 2
    assert keras_internals.jitted_train_step(model) is not None  # read through the door
    keras_internals.unwatch_train_steps(model)
    assert keras_internals.train_function_wrappers(model) == 0


# --- A model's first fit, prepared ahead (layout/autopilot.py, layout/verify.py) ----------------------

def test_set_layout_gives_an_optimizer_slot_made_later_its_weights_layout(runtime):
    """_layout: what add_variable_from_reference hands a slot; _value: the array."""
    import jax
    import keras

    mesh = keras.distribution.DeviceMesh((8,), ["batch"], keras.distribution.list_devices())
    cut = keras.distribution.TensorLayout(("batch", None), mesh)
    kernel = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)]).layers[0].kernel  # whole, on one device
    value = jax.device_put(kernel.value, cut.backend_layout)
    keras_internals.set_layout(kernel, cut, value)
    assert kernel.value is value
    slot = keras.optimizers.Adam().add_variable_from_reference(kernel, "momentum")
    assert tuple(slot.value.sharding.spec) == ("batch", None)


def test_stand_ins_leave_what_fit_builds_for_fit_to_build():
    """_compile_loss (CompileLoss of _user_loss ...), _compile_metrics and optimizer swapped and put back; Keras's
    _symbolic_build then still reads the first batch (the shuffle it draws stays the plain run's)."""
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)], name="m")
    model.compile("adam", "mse", metrics=["mae"])
    own = (model.optimizer, model._compile_loss, model._compile_metrics)
    metrics = list(model.metrics)
    stand_in = keras.optimizers.SGD()
    batch = (np.zeros((2, 3), "float32"), np.zeros((2, 2), "float32"))
    with keras_internals.stand_ins(model, stand_in, batch):
        assert model.optimizer is stand_in and model._compile_metrics is None and model._compile_loss.built
        assert model._compile_loss is not own[1]
    assert (model.optimizer, model._compile_loss, model._compile_metrics) == own and model.metrics == metrics
    assert not own[0].built and not own[1].built and not own[2].built

    def drawn_after_fit(fitted):  # NumPy's next draw after a fit: it counts the draws fit made (the shuffles)
        np.random.seed(5)
        fitted.fit(np.zeros((16, 3), "float32"), np.zeros((16, 2), "float32"), batch_size=8, verbose=0)
        return np.random.rand()

    plain = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)], name="plain")
    plain.compile("adam", "mse", metrics=["mae"])
    # The same draws as a plain fit of a model never stood in for (3.15 draws two permutations there, the symbolic
    # build's read and the epoch's; keras-nightly 3.16 another count): a build the stand-ins left done would skip one.
    assert drawn_after_fit(model) == drawn_after_fit(plain)


def test_uses_keras_train_step_tells_a_models_own_train_step():
    import keras

    class Own(keras.Model):
        def train_step(self, state, data):
            return super().train_step(state, data)

    assert keras_internals.uses_keras_train_step(_model())
    assert not keras_internals.uses_keras_train_step(Own())


def test_slot_references_follow_add_variable_from_references_names():
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    references = keras_internals.slot_references(optimizer, model.trainable_variables)
    slots = [v for v in optimizer.variables if len(v.shape)]
    assert len(references) == len(slots) == 2 * len(model.trainable_variables)
    assert all(tuple(references[id(slot)].shape) == tuple(slot.shape) for slot in slots)
    assert {references[id(slot)].path for slot in slots} == {v.path for v in model.trainable_variables}


def test_no_distribution_puts_back_the_one_in_force(runtime):
    import keras

    with runtime.scope():
        with keras_internals.no_distribution():
            assert keras.distribution.distribution() is None
        assert keras.distribution.distribution() is runtime.distribution


def test_computing_in_float32_reaches_nested_layers_and_puts_each_policy_back():
    import keras
    import numpy as np

    inner = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, dtype="mixed_bfloat16")])
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, dtype="mixed_bfloat16"), inner])
    x = np.ones((2, 4), np.float32)
    assert keras.backend.standardize_dtype(model(x).dtype) == "bfloat16"
    with keras_internals.computing_in_float32(model):
        assert keras.backend.standardize_dtype(model(x).dtype) == "float32"
        assert inner.layers[0].compute_dtype == "float32"
    assert [layer.dtype_policy.name for layer in (model.layers[0], inner.layers[0])] == ["mixed_bfloat16"] * 2
    assert keras.backend.standardize_dtype(model(x).dtype) == "bfloat16"


def test_built_but_not_marked_is_what_keras_calls_the_model_to_build():
    """A model of two built sub-models with no call() (a VAE): Keras's symbolic build would call it, and fails."""
    import keras

    encoder = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    decoder = keras.Sequential([keras.Input((2,)), keras.layers.Dense(4)])

    class TwoModels(keras.Model):
        def __init__(self):
            super().__init__()
            self.encoder, self.decoder = encoder, decoder

    class Called(TwoModels):
        def call(self, x):
            return self.decoder(self.encoder(x))

    model = TwoModels()
    model.compile(optimizer="adam")
    assert keras_internals.built_but_not_marked(model)
    with pytest.raises(RuntimeError, match="Unable to automatically build the model"):
        model._symbolic_build(data_batch=np.zeros((2, 4), "float32"))
    assert not keras_internals.built_but_not_marked(Called())  # its own call: Keras builds it by calling it
    assert not keras_internals.built_but_not_marked(keras.Sequential([keras.layers.Dense(2)]))  # unbuilt layers
    model.built = True
    assert not keras_internals.built_but_not_marked(model)
    model._symbolic_build(data_batch=np.zeros((2, 4), "float32"))  # nothing left to call it for


@pytest.mark.parametrize("shuffle", [True, "batch", False])
def test_arrays_on_devices_array_data_adapter_order_class_weight_and_get_data_adapter(shuffle):
    """ArrayDataAdapter's `_inputs`, `_get_iterator` and its np.random draws: the adapter's batches are Keras's own,
    in order (the partial last batch too), class weights made sample weights; get_data_adapter returns it as is."""
    import jax
    from keras.src.trainers.data_adapters import get_data_adapter
    from keras.src.trainers.data_adapters.array_data_adapter import ArrayDataAdapter

    x = np.arange(50, dtype=np.float32).reshape(25, 2)
    y = np.arange(25) % 2
    arguments = dict(batch_size=8, shuffle=shuffle, class_weight={0: 1.0, 1: 2.0})
    np.random.seed(5)
    keras_batches = [[np.asarray(part) for part in batch]
                     for batch in ArrayDataAdapter(x, y, steps=None, **arguments).get_jax_iterator()]
    adapter = keras_internals.arrays_on_devices(x, y, None, steps=None, place=jax.device_put,
                                                gather=lambda placed, i: jax.tree.map(lambda a: a[i], placed),
                                                token=lambda i: i, **arguments)
    assert get_data_adapter(adapter) is adapter
    np.random.seed(5)
    batches = [[np.asarray(part) for part in batch] for batch in adapter.get_jax_iterator()]
    assert [len(batch[0]) for batch in batches] == [8, 8, 8, 1]
    for ours, keras_own in zip(batches, keras_batches, strict=True):
        for a, b in zip(ours, keras_own, strict=True):
            np.testing.assert_array_equal(a, b)
    adapter.tokens = True
    assert [len(indices) for indices in adapter.get_jax_iterator()] == [8, 8, 8, 1]


def test_arrays_on_devices_in_an_order_array_data_adapter_num_samples_size_and_partial_batch():
    """`_num_samples`, `_size`, `_partial_batch_size` (what _get_iterator and the public properties read): an epoch in
    an order of some rows gives the batches Keras would give for the arrays taken in it, from arrays placed once."""
    import jax
    from keras.src.trainers.data_adapters.array_data_adapter import ArrayDataAdapter

    x = np.arange(50, dtype=np.float32).reshape(25, 2)
    y = np.arange(25) % 2
    order = np.random.default_rng(3).permutation(25)[:19]  # 19 of the 25 rows: 2 batches of 8 and one of 3
    keras_batches = [[np.asarray(part) for part in batch]
                     for batch in ArrayDataAdapter(x[order], y[order], batch_size=8).get_jax_iterator()]
    places = []
    gather = lambda placed, i: jax.tree.map(lambda a: a[i], placed)  # noqa: E731
    first = keras_internals.arrays_on_devices(x, y, None, batch_size=8, steps=None, shuffle=True, class_weight=None,
                                              place=lambda inputs: places.append(inputs) or jax.device_put(inputs),
                                              gather=gather, token=lambda i: i, order=order)
    adapter = keras_internals.arrays_on_devices(x, y, None, batch_size=8, steps=None, shuffle=True, class_weight=None,
                                                place=None, gather=gather, token=lambda i: i, order=order,
                                                placed=first.placed)
    assert len(places) == 1 and adapter.placed is first.placed
    assert (adapter.num_batches, adapter.partial_batch_size, adapter.has_partial_batch) == (3, 3, True)
    batches = [[np.asarray(part) for part in batch] for batch in adapter.get_jax_iterator()]
    for ours, keras_own in zip(batches, keras_batches, strict=True):  # shuffle is the order's: not drawn again
        for a, b in zip(ours, keras_own, strict=True):
            np.testing.assert_array_equal(a, b)


def test_compiled_functions_train_function_and_test_function_made_again_by_compile():
    """Trainer keeps its made functions in train_function / test_function (under acceltrain's door too); compile()
    makes them None: new objects after."""
    model = _model()
    model.fit(np.zeros((4, 3), "float32"), np.zeros((4, 2), "float32"),
              validation_data=(np.zeros((2, 3), "float32"), np.zeros((2, 2), "float32")), epochs=1, verbose=0)
    made = keras_internals.compiled_functions(model)
    assert all(callable(function) for function in made)
    keras_internals.run_train_executions(model, lambda state, iterator, own: own(state, iterator))
    assert keras_internals.compiled_functions(model)[0] is made[0]  # under the door: the function Keras made
    keras_internals.stop_running_train_executions(model)
    model.compile(model.optimizer, model.loss)
    assert keras_internals.compiled_functions(model) == (None, None)


def test_watch_evaluation_batches_make_test_function_and_function_state_iterator():
    """JAXTrainer.evaluate/predict make their function (kept while set) before on_test_begin/on_predict_begin, then
    call function(state, iterator), which pulls its batches: each is seen, and the function is Keras's again after."""
    import keras

    model = _model()
    seen = {"test": [], "predict": []}

    class Watching(keras.callbacks.Callback):
        def on_test_begin(self, logs=None, kind="test"):
            self.undo = keras_internals.watch_evaluation_batches(self.model, kind, seen[kind].append)

        def on_test_end(self, logs=None):
            self.undo()

        def on_predict_begin(self, logs=None):
            self.on_test_begin(logs, "predict")

        on_predict_end = on_test_end

    x, y = np.zeros((10, 3), "float32"), np.zeros((10, 2), "float32")
    model.evaluate(x, y, batch_size=4, verbose=0, callbacks=[Watching()])
    model.predict(x[:5], batch_size=4, verbose=0, callbacks=[Watching()])
    rows = lambda batch: len(batch if hasattr(batch, "shape") else batch[0])  # noqa: E731  (x, y) or predict's x
    assert [rows(batch) for batch in seen["test"]] == [4, 4, 2]
    assert [rows(batch) for batch in seen["predict"]] == [4, 1]
    assert not hasattr(model.test_function, "__wrapped__") and model.test_function.__name__ != "counted"


def test_test_states_through_make_test_function_and_test_function_state_iterator(monkeypatch):
    """JAXTrainer.evaluate (and fit's validation) keep a test function already made and call it with (state,
    iterator), the state the (trainable, non-trainable, metrics) values: each call's state passes `through` first
    (fit's validation, three batches, and evaluate's), and the function is Keras's own again after the undo."""
    import keras

    from acceltrain.backends.jax import resident

    monkeypatch.setenv(resident.ENV_OFF, "0")  # Keras's own steps an execution: its functions are not made again
    model = _model()
    states = []
    undo = keras_internals.test_states_through(model, lambda state: states.append(state) or state)
    made = keras_internals.compiled_functions(model)[1]
    x, y = np.zeros((10, 3), "float32"), np.zeros((10, 2), "float32")
    model.fit(x, y, batch_size=4, epochs=1, validation_data=(x[:9], y[:9]), verbose=0)
    model.evaluate(x, y, batch_size=4, verbose=0)
    assert len(states) == 3 + 3 and all(len(state) == 3 for state in states)
    assert len(states[0][2]) == len(model.metrics_variables)
    undo()
    assert model.test_function is not made and model.test_function.__name__ != "through_first"
    assert keras_internals.test_states_through(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]),
                                               lambda state: state) is None  # not compiled: nothing to wrap


def test_keras_scans_steps_data_adapter_get_jax_iterator_super_batch():
    """Keras 3.15's DataAdapter.get_jax_iterator takes no super_batch; keras-nightly 3.16's does."""
    import keras

    assert keras_internals.keras_scans_steps() is (tuple(map(int, keras.__version__.split(".")[:2])) >= (3, 16))


def test_run_train_executions_make_train_function_and_train_function_calls():
    """JAXTrainer.fit calls train_function(state, iterator) once an execution, after make_train_function (which keeps
    a set function); the runner then runs each, and the door is gone once stopped."""
    model = _model()
    calls = []

    def run(state, iterator, keras_own):
        calls.append(1)
        return keras_own(state, iterator)

    class Install(__import__("keras").callbacks.Callback):
        def on_train_begin(self, logs=None):
            assert keras_internals.run_train_executions(model, run)

    keras_internals.keras_method(model, "fit")(np.zeros((12, 3)), np.zeros((12, 2)), batch_size=4, epochs=2, verbose=0,
                                               callbacks=[Install()])  # Keras's own, whatever runtime is open
    assert len(calls) == 6
    keras_internals.stop_running_train_executions(model)
    assert keras_internals.train_function_wrappers(model) == 0


def _backend_compiles():
    """A list that counts JAX's backend compiles from now on, and the function that stops counting."""
    import jax

    compiles = []

    def span(event, *_, **__):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    jax.monitoring.register_event_time_span_listener(span)
    return compiles, lambda: jax.monitoring.unregister_event_time_span_listener(span)


def _seed(seed: int) -> None:
    """Keras's seed, and Python's random that draws an unseeded initializer's seed."""
    import random

    keras_internals.set_keras_seed(seed)
    random.seed(seed)


def _seeded_build(build, at_once: bool):
    _seed(3)
    if not at_once:
        return build()
    with keras_internals.variables_initialized_at_once():
        return build()


def _models():
    """Shapes to build both ways: the seed's MLP (Glorot, zeros, RMSprop), a normalization and a convolution with
    Adam, and a layer whose initializer draws from a SeedGenerator (Keras's own path, op by op)."""
    import keras

    from acceltrain.recipes import mnist_mlp

    def conv():
        model = keras.Sequential([keras.Input((7, 5, 3)), keras.layers.Conv2D(4, 3), keras.layers.BatchNormalization(),
                                  keras.layers.Flatten(), keras.layers.Dense(3, kernel_initializer="he_normal")])
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        return model

    def drawing():
        seeds = keras.random.SeedGenerator(5)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(
            3, kernel_initializer=keras.initializers.RandomNormal(seed=seeds)), keras.layers.Dense(2)])
        model.compile("sgd", "mse")
        return model

    return [mnist_mlp.build_model, conv, drawing]


@pytest.mark.parametrize("which", range(3))
def test_variables_initialized_at_once_and_optimizer_built_at_once_give_keras_arrays(which):
    """JaxVariable._initialize_with_initializer, _initialize and _deferred_initialize: the same arrays as Keras's
    op-by-op initialization, the model's and its optimizer's (optimizer_built_at_once), the stateless ones from one
    program each."""
    import keras

    build = _models()[which]
    keras_way = _seeded_build(build, at_once=False)
    keras_way.optimizer.build(keras_way.trainable_variables)
    compiles, stop = _backend_compiles()
    try:
        ours = _seeded_build(build, at_once=True)
        built = len(compiles)
        keras_internals.optimizer_built_at_once(ours)
        ours.optimizer.build(ours.trainable_variables)  # as fit's first call does
    finally:
        stop()
    assert "build" in vars(ours.optimizer) and ours.optimizer.built
    if which < 2:  # every initializer stateless: one program for the weights (the optimizer's counter converted too)
        assert 1 <= built <= 2, compiles
    expected = [*keras_way.weights, *keras_way.optimizer.variables]
    got = [*ours.weights, *ours.optimizer.variables]
    assert [v.shape for v in got] == [v.shape for v in expected]  # names count up with each build
    for mine, keras_own in zip(got, expected):
        assert mine.dtype == keras_own.dtype and np.array_equal(keras.ops.convert_to_numpy(mine),
                                                                keras.ops.convert_to_numpy(keras_own)), mine.path


def test_metrics_results_from_the_last_step_get_metrics_result_or_logs_gives_keras_values():
    """Trainer._get_metrics_result_or_logs: fit's and evaluate's results the same with the last step's logs as with
    Keras's eager recomputation, on Adam + accuracy with sample weights and an odd-sized last batch; a custom
    train_step whose logs name other keys keeps Keras's own choice."""
    import keras

    rng = np.random.default_rng(0)
    x, y, w = rng.normal(size=(37, 4)).astype("float32"), rng.integers(0, 3, 37), rng.uniform(size=37)
    results = []
    for ours in (False, True):
        _seed(1)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        if ours:
            keras_internals.metrics_results_from_the_last_step(model)
            installed, passed_on = vars(model)["_get_metrics_result_or_logs"], []

            def spied(logs):
                passed_on.append(installed(logs) is logs)
                return logs if passed_on[-1] else installed(logs)

            object.__setattr__(model, "_get_metrics_result_or_logs", spied)
        history = model.fit(x, y, sample_weight=w, batch_size=8, epochs=2, validation_data=(x[:9], y[:9]), verbose=0,
                            shuffle=False)  # the same batches both times
        results.append((history.history, model.evaluate(x, y, batch_size=10, return_dict=True, verbose=0)))
    assert results[0] == results[1]
    assert len(passed_on) == 2 + 2 + 1 and all(passed_on)  # 2 epochs, 2 validations, 1 evaluate: the steps' logs

    class Custom(keras.Model):
        def train_step(self, *args, **kwargs):
            return {"other": keras.ops.zeros(())}

    inputs = keras.Input((4,))
    model = Custom(inputs, keras.layers.Dense(3)(inputs))
    model.compile("sgd", "mse")
    keras_internals.metrics_results_from_the_last_step(model)
    assert model._get_metrics_result_or_logs({"other": 1.0}) == {"other": 1.0}  # not Keras's metrics


@pytest.mark.tensorflow
def test_built_from_one_replica_builds_a_string_model_that_keras_reduces_to_a_sum_of_strings():
    """Keras's own symbolic build under MirroredStrategy means the first batch over the replicas: with strings, AddN
    refuses (a plain reproduction, no runtime); from the first replica's slice it builds, and the model's own method
    is given back."""
    from tests import support

    done = support.python(support.SCRIPTS / "strings_under_mirrored.py", timeout=300)

    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("keras: InvalidArgumentError") and "of string is not in the list" in lines[0], done.stdout
    assert lines[1:] == ["one replica: ok", "own method back: True"], done.stdout


@pytest.mark.tensorflow
def test_added_losses_scaled_once_reports_a_layers_own_loss_as_one_device_does():
    """A layer's add_loss of a keras.losses.Loss's value: under MirroredStrategy over 2 replicas Keras divides it by
    the replicas twice (half the one-device loss: a plain reproduction, no runtime); scaled once, it is the
    one-device loss; the model's own method and Loss.__call__ are given back."""
    from tests import support

    done = support.python(support.SCRIPTS / "added_loss_under_mirrored.py", timeout=300)

    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    one_device, keras_own, once = (float(lines[name]) for name in ("one device", "keras", "scaled once"))
    assert keras_own == pytest.approx(one_device / 2, rel=1e-5)
    assert once == pytest.approx(one_device, rel=1e-5)
    assert lines["given back"] == "True"


@pytest.mark.tensorflow
def test_draws_apart_per_replica_gives_each_replica_its_own_noise_and_leaves_other_draws_alone():
    """Keras's draws in the replicas of MirroredStrategy over 2 replicas (a SeedGenerator's normal, dropout with a
    fixed seed, a Dropout layer in training): alike in both replicas as Keras draws them (a plain reproduction, no
    runtime), apart inside; a draw outside the replicas is Keras's own either way; Keras's draw_seed is given back."""
    from tests import support

    done = support.python(support.SCRIPTS / "draws_under_mirrored.py", timeout=300)

    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "keras: alike [True, True, True]" and lines[2] == "apart: alike [False, False, False]", lines
    assert lines[1].removeprefix("keras: ") == lines[3].removeprefix("apart: ") and lines[1].startswith("keras: outside")
    assert lines[4] == "given back: True"


def test_backups_deleted_by_any_process_takes_a_backup_another_process_deleted_first_as_deleted(tmp_path, monkeypatch):
    """Keras's BackupAndRestore deletes its backup at a fit's end with file_utils.rmtree; under launch two processes
    share the folder, and the second raised FileNotFoundError after training. Here the other process's deletion is
    made to land while Keras walks the folder: Keras's own raises, the replaced one finishes, and gives Keras's back."""
    import shutil

    import keras
    from keras.src.utils import file_utils

    own = keras.callbacks.BackupAndRestore.on_train_end
    keras_rmtree = file_utils.rmtree

    def after_another_process(path):
        shutil.rmtree(path)  # the other process of the job was first
        return keras_rmtree(path)

    monkeypatch.setattr(file_utils, "rmtree", after_another_process)
    for replaced in (False, True):
        backup = tmp_path / f"backup-{replaced}"
        backup.mkdir()
        (backup / "latest.weights.h5").write_bytes(b"weights")
        callback = keras.callbacks.BackupAndRestore(str(backup))
        if not replaced:
            with pytest.raises(FileNotFoundError):
                callback.on_train_end()
            continue
        with keras_internals.backups_deleted_by_any_process():
            callback.on_train_end()
        assert not backup.exists()
    assert keras.callbacks.BackupAndRestore.on_train_end is own


def test_numbers_read_from_mirrored_reads_a_distributed_value_as_numpy_and_leaves_the_rest_to_keras():
    """int()/float() of a Keras variable whose value is TensorFlow's distributed variable (which has no __int__:
    Keras's own raises TypeError, as a MirroredVariable did in a newcomer's script) read as numpy reads it; a JAX
    variable's stay Keras's; Keras's methods given back. The real MirroredVariable: test_keras_objects_made_in_...
    (tests/scripts/made_in_scope.py), and every open runtime enters it (test_runtime)."""
    import keras
    import numpy as np
    from keras.src.backend.common import variables

    mirrored = type("MirroredVariable", (), {"__module__": "tensorflow.python.distribute.values",
                                             "__array__": lambda self, dtype=None: np.asarray(7, dtype=dtype)})
    # What Keras's methods read of a variable: its ndim, its value, and numpy's view (Keras's __array__)
    held = type("Held", (), {"ndim": 0, "value": mirrored(), "__array__": variables.Variable.__array__})()
    with pytest.raises(TypeError):
        int(held.value)  # what Keras's own __int__ does with it
    own = variables.Variable.__int__, variables.Variable.__float__  # Keras's, or an open runtime's (it enters this)
    with keras_internals.numbers_read_from_mirrored():
        assert variables.Variable.__int__(held) == 7 and variables.Variable.__float__(held) == 7.0
        assert int(keras.Variable(3)) == 3 and float(keras.Variable(0.5)) == 0.5  # JAX's: Keras's own read
        with pytest.raises(TypeError, match="Only scalar"):
            int(keras.Variable(np.zeros(2)))  # Keras's own refusal stands
    assert (variables.Variable.__int__, variables.Variable.__float__) == own


def test_clear_session_replaced_is_one_function_exported_twice_and_given_back():
    """keras.backend.clear_session and keras.utils.clear_session are Keras's one clear_session: both replaced inside,
    both Keras's own again after."""
    import keras

    own = keras.backend.clear_session
    assert keras.utils.clear_session is own
    calls = []
    with keras_internals.clear_session_replaced(lambda keras_own: lambda: calls.append(keras_own is own)):
        keras.backend.clear_session()
        keras.utils.clear_session()
    assert calls == [True, True]
    assert keras.backend.clear_session is own and keras.utils.clear_session is own


@pytest.mark.tensorflow
def test_keras_objects_made_in_makes_keras_variables_models_and_optimizers_the_strategys_and_nothing_else():
    """Inside keras_objects_made_in(MirroredStrategy over 2 logical CPUs), without acceltrain's runtime: a layer's
    weight, a keras.Variable, a model's strategy and an optimizer's slot built outside fit are the strategy's, and fit
    runs outside its scope; a tf.Variable of the code's own is plain and get_strategy() answers the default strategy;
    Keras's seed state first made in a dataset map is plain (mirrored, TensorFlow's UnliftableError: the negative
    control was run by hand); a mirrored scalar reads as int() and float() read a plain one; the code's own strategy
    wins, the default strategy's scope included; Keras's six methods are given back."""
    from tests import support

    done = support.python(support.SCRIPTS / "made_in_scope.py", timeout=300)

    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "own tf.Variable: ResourceVariable", "strategy in force: _DefaultDistributionStrategy",
        "layer weight: MirroredVariable | keras.Variable: MirroredVariable",
        "model's strategy: MirroredStrategy | optimizer slot: MirroredVariable", "fit outside the scope: True",
        "read as numbers: MirroredVariable 1 0.0010000000474974513 3 0.5", "keras.random in a dataset map: 4", "under its own strategy: OneDeviceStrategy",
        "under the default strategy's scope: ResourceVariable", "given back: True",
        "after: ResourceVariable"], done.stdout


def test_batch_hooks_idle_as_keras_checkpoint_callbacks_save_only_at_epochs_ends(tmp_path):
    """batch_hooks_idle relies on ModelCheckpoint's and BackupAndRestore's on_train_batch_end saving nothing at
    save_freq='epoch' and BackupAndRestore having no on_train_batch_begin: each called at many batches here saves
    nothing, and one saving every 2 steps saves (so the check can fail)."""
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    epochwise = [keras.callbacks.ModelCheckpoint(str(tmp_path / "m.weights.h5"), save_weights_only=True),
                 keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))]
    stepwise = keras.callbacks.ModelCheckpoint(str(tmp_path / "s.weights.h5"), save_weights_only=True, save_freq=2)
    for callback in [*epochwise, stepwise]:
        callback.set_model(model)
        callback.on_epoch_begin(0)
        for batch in range(6):
            callback.on_train_batch_end(batch, {"loss": 1.0})
    assert sorted(path.name for path in tmp_path.iterdir()) == ["s.weights.h5"]
    assert keras.callbacks.BackupAndRestore.on_train_batch_begin is keras.callbacks.Callback.on_train_batch_begin
    assert all(keras_internals.batch_hooks_idle(callback) for callback in epochwise)
    assert not keras_internals.batch_hooks_idle(stepwise)
