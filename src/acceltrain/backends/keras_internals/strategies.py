"""Keras under a tf.distribute strategy: a model built from one replica's batch, a layer's added loss scaled once.

Part of backends/keras_internals/: every use of Keras's private code, each with the behaviour it relies on and a test
by name in tests/backends/test_keras_internals.py.
"""

import contextlib

import keras

from acceltrain.backends.interception import patched

# --- A model with no call() under a tf.distribute strategy (backends/tensorflow.py) --------------------------

def built_but_not_marked(model) -> bool:
    """Whether `model` has no call() of its own (a VAE of an encoder and a decoder, its own train_step), is not marked
    built, and every layer inside it is built: nothing is left to build in it, but Keras, under a tf.distribute
    strategy, would build it by calling it on a symbolic batch, which it cannot answer.

    Relies on: trainers/trainer.py::_symbolic_build, which calls the model when `not all(layer.built for layer in
    self._flatten_layers())` (the model itself among them); keras.Model's own call() raises for a subclass that
    defines none.
    """
    import keras

    own_call = any("call" in vars(cls) for cls in type(model).__mro__
                   if issubclass(cls, keras.Model) and cls is not keras.Model)
    return not own_call and not model.built and all(layer.built for layer in model._flatten_layers(include_self=False))


@contextlib.contextmanager
def built_from_one_replica(model):
    """Within: Keras's symbolic build of `model` under a tf.distribute strategy reads the first replica's slice of the
    first batch, not its mean over the replicas. The build reads only the batch's shapes and dtypes, which every
    slice shares with the mean; but a batch of strings has no mean: TensorFlow's AddN refuses tf.string, so a model
    called on strings (TextVectorization inside it) fails its first evaluate or fit under MirroredStrategy, before any
    step, whether acceltrain runs it or not (issue 45; tests/backends/test_keras_internals.py reproduces it plainly).

    Relies on: backend/tensorflow/trainer.py::TensorFlowTrainer._maybe_symbolic_build(iterator=None, data_batch=None),
    called as a method at the start of fit and evaluate: under a strategy it takes next() of the epoch iterator's
    first (_, _, iterator), reduces it with strategy.reduce("MEAN", ..., axis=None) where every leaf is
    DistributedValues, and builds from the batch it is given as `data_batch` otherwise.
    """
    import tensorflow as tf

    keras_build = model._maybe_symbolic_build
    strategy = model.distribute_strategy

    def one_replica(value):
        return strategy.experimental_local_results(value)[0] \
            if isinstance(value, tf.distribute.DistributedValues) else value

    def from_one_replica(iterator=None, data_batch=None):
        if iterator is not None and data_batch is None:
            for _, _, batches in iterator:
                data_batch = keras.tree.map_structure(one_replica, next(batches))
                break
        return keras_build(data_batch=data_batch)

    object.__setattr__(model, "_maybe_symbolic_build", from_one_replica)  # the model's own, not its class's
    try:
        yield
    finally:
        object.__delattr__(model, "_maybe_symbolic_build")


SCALED_REDUCTIONS = ("sum_over_batch_size", "mean", "mean_with_sample_weight")  # reduce_values scales these


@contextlib.contextmanager
def added_losses_scaled_once(model):
    """Within: a loss a layer adds (`add_loss`) that a keras.losses.Loss object computed is divided by the replicas
    of a tf.distribute strategy once, as a compiled loss is, not twice. Keras divides such a value once in the Loss
    (so that the replicas' gradients sum to the global batch's) and again as an added loss, so its reported loss and
    its gradients were 1/replicas of a plain run's (issue 45: keras.io's endpoint layer, 0.344 plainly, 0.086 at 4
    replicas, 0.043 at 8; under MirroredStrategy without acceltrain too: tests/scripts/added_loss_under_mirrored.py).
    A value the layer computes itself (ops.mean(...)) is divided once, by Keras's own aggregate, as before.

    Relies on: losses/loss.py::Loss.__call__, which returns reduce_weighted_values(...), scaled by
    scale_loss_for_distribution for the reductions in SCALED_REDUCTIONS; backend/tensorflow/trainer.py::
    TensorFlowTrainer._aggregate_additional_loss(loss), called as a method on each of `model.losses` (the Loss's
    result itself, as add_loss keeps it), which scales again after trainers/trainer.py::Trainer's sum and cast.
    """
    from keras.src.losses.loss import Loss
    from keras.src.trainers import trainer as trainers

    Trainer = getattr(trainers, "Trainer", None) or trainers.BaseTrainer  # keras-nightly 3.16: BaseTrainer

    scaled = []  # the Loss objects' results, kept alive for the call: compared by identity

    def recording(name, keras_call):
        def call(self, *args, **kwargs):
            value = keras_call(self, *args, **kwargs)
            if self.reduction in SCALED_REDUCTIONS:
                scaled.append(value)
            return value
        return call

    keras_aggregate = model._aggregate_additional_loss

    def once(loss):
        if any(loss is value for value in scaled):
            return Trainer._aggregate_additional_loss(model, loss)  # summed and cast, not scaled again
        return keras_aggregate(loss)

    object.__setattr__(model, "_aggregate_additional_loss", once)  # the model's own, not its class's
    with patched(Loss, ["__call__"], recording):
        try:
            yield
        finally:
            object.__delattr__(model, "_aggregate_additional_loss")


# --- Random draws in the replicas of a strategy (backends/tensorflow.py) ------------------------------------

# Each module that draws, by its names in Keras's versions, the first that imports taken (keras-nightly 3.16 moved
# the image ops into ops/).
DRAWING_MODULES = (("keras.src.backend.tensorflow.random",),
                   ("keras.src.backend.tensorflow.image", "keras.src.backend.tensorflow.ops.image"))


@contextlib.contextmanager
def draws_apart_per_replica():
    """Within: a random draw of Keras's in a replica of a tf.distribute strategy over several replicas folds the
    replica's id into its seed, so each replica's slice of a batch gets noise of its own, as each sample of a plain
    run does. Keras draws with the same seed in every replica (a SeedGenerator's state is a mirrored variable, alike in
    every replica), so under MirroredStrategy over 4 replicas the samples i, i+16, i+32 and i+48 of a batch of 64 got
    the same dropout mask, the same augmentation and a VAE's same sampling noise, whether acceltrain ran it or not
    (issue 45; tests/backends/test_keras_internals.py shows it plainly). At one replica, or outside a replica (a
    tf.data map), a draw is Keras's own.

    Relies on: backend/tensorflow/random.py's draws (normal, uniform, categorical, randint, truncated_normal, dropout,
    shuffle, gamma, binomial, beta) and backend/tensorflow/image.py's (3.16: ops/image.py) each calling their module's
    own name `draw_seed(seed)` (from random/seed_generator.py) and handing its [2] seed to tf.random.stateless_*.
    """
    import importlib

    import tensorflow as tf

    def apart(keras_draw_seed):
        def draw_seed(seed):
            value = keras_draw_seed(seed)
            replica = tf.distribute.get_replica_context()
            if replica is None or replica.num_replicas_in_sync == 1:
                return value
            return tf.random.experimental.stateless_fold_in(value, tf.cast(replica.replica_id_in_sync_group,
                                                                           value.dtype))
        return draw_seed

    def first_found(names):
        for name in names[:-1]:
            try:
                return importlib.import_module(name)
            except ModuleNotFoundError:
                continue
        return importlib.import_module(names[-1])  # none found: its error names the newest place looked

    modules = [first_found(names) for names in DRAWING_MODULES]
    with contextlib.ExitStack() as stack:
        for module in modules:
            stack.enter_context(patched(module, ["draw_seed"], lambda _, keras_draw_seed: apart(keras_draw_seed)))
        yield


# --- Only Keras's own objects made in a strategy's scope (backends/tensorflow.py::scope, keras_only) --------------

@contextlib.contextmanager
def keras_objects_made_in(strategy, own_scope=lambda name: None):
    """Within: what Keras needs made in `strategy`'s scope is made there, wherever the code making it runs; the rest
    runs as it would without the strategy (a tf.Variable of the caller's own, a tf.data pipeline, numpy, file I/O,
    tf.distribute.get_strategy() answering TensorFlow's default strategy). Keras needs: each Keras variable (a layer's
    weights, an optimizer's slots, a metric's state, a SeedGenerator's) created as the strategy's, a model and an
    optimizer keeping the strategy they were made under (fit, evaluate, predict and apply_gradients then run under it
    wherever they are called, as a plain script that builds its model in `with strategy.scope():` and fits outside
    it), and an optimizer's slots colocated with their variables. Each is passed as Keras makes it where a strategy is
    already in force (the code's own scope: its strategy's, as plainly; TensorFlow's default strategy's scope too,
    inside which another strategy's variables cannot be made: "Mixing different tf.distribute.Strategy objects"),
    and where tf.data traces a function
    (`dataset.map(f)`: a variable created there is lifted out of a graph on the pipeline's host, and a mirrored one
    cannot be, TensorFlow's UnliftableError; tf.data names that graph "Dataset_<transformation>_<function>").

    Relies on: backend/tensorflow/core.py::Variable._initialize(value) (3.16: ops/core.py) making every Keras
    variable's tf.Variable (its deferred and eager paths both); the trainer class's __init__ (TensorFlowTrainer;
    3.16: Trainer) keeping tf.distribute.get_strategy() as the model's _distribute_strategy when a strategy is in force; backend/tensorflow/
    optimizer.py::TFOptimizer.__init__ keeping it as _distribution_strategy, and its add_variable_from_reference
    entering that strategy's colocate_vars_with (which TensorFlow allows only inside its scope); and TensorFlow's
    default strategy's scope known by its variable creator (_in_default_strategys_scope). `own_scope(name)` is called
    with the name of the code's own strategy each time Keras makes something in its scope.
    """
    import tensorflow as tf
    from keras.src.backend import tensorflow as backend
    from keras.src.backend.tensorflow import optimizer, trainer

    trainer_class = getattr(trainer, "TensorFlowTrainer", None) or trainer.Trainer  # 3.16: renamed Trainer

    def in_scope(_, keras_own):
        def made(*args, **kwargs):
            graph = getattr(tf.compat.v1.get_default_graph(), "name", "")
            if tf.distribute.has_strategy() or _in_default_strategys_scope(tf) or graph.startswith("Dataset_"):
                if tf.distribute.get_strategy() is not strategy and not graph.startswith("Dataset_"):
                    own_scope(type(tf.distribute.get_strategy()).__name__.strip("_"))
                return keras_own(*args, **kwargs)
            with strategy.scope():
                return keras_own(*args, **kwargs)
        return made

    with patched(backend.Variable, ["_initialize"], in_scope), \
            patched(trainer_class, ["__init__"], in_scope), \
            patched(optimizer.TFOptimizer, ["__init__", "add_variable_from_reference"], in_scope), \
            numbers_read_from_mirrored():
        yield


@contextlib.contextmanager
def numbers_read_from_mirrored():
    """Within: `int(v)` and `float(v)` of a scalar Keras variable whose value is a tf.distribute variable (a
    MirroredVariable: every Keras variable made under a strategy of several replicas, a script's under `acceltrain run`
    or a model's built in Runtime.scope() on TensorFlow) read its value as numpy does, as they read a plain one. A plain
    script's `int(model.optimizer.iterations)` or `float(model.optimizer.learning_rate)` raised "TypeError: int()
    argument must be ..., not 'MirroredVariable'" there and ran plainly. Entered by every open runtime
    (interception.intercept's `also`) and by keras_objects_made_in; imports no framework (a value's class tells).

    Relies on: backend/common/variables.py::Variable.__int__/__float__ returning int(self.value)/float(self.value),
    which TensorFlow's distributed variables (tensorflow/python/distribute/) do not support (no __int__/__float__:
    TypeError), while np.asarray(variable), Keras's own __array__, reads them."""
    import numpy as np
    from keras.src.backend.common import variables

    def as_number(name, keras_own):
        number = int if name == "__int__" else float

        def read(variable):
            if variable.ndim == 0 and any(kind.__module__.startswith("tensorflow.python.distribute")
                                          for kind in type(variable.value).__mro__):
                return number(np.asarray(variable))
            return keras_own(variable)
        return read

    with patched(variables.Variable, ["__int__", "__float__"], as_number):
        yield


def _in_default_strategys_scope(tf) -> bool:
    """Whether the code entered TensorFlow's default strategy's scope (`with tf.distribute.get_strategy().scope():`
    outside any other), which no public call tells from no scope at all. Relies on (TensorFlow 2.21): that scope puts
    distribute_lib._DefaultDistributionContext's own variable creator on the graph's _variable_creator_stack of
    (priority, creator) pairs."""
    stack = getattr(tf.compat.v1.get_default_graph(), "_variable_creator_stack", ())
    return any("_DefaultDistributionContext" in getattr(creator, "__qualname__", "") for _, creator in stack)
