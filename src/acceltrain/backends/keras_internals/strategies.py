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
