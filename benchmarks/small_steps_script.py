"""The script benchmarks/small_steps.py times: a batch-32 training step of a small model, as Keras's fit runs it
(`--loop fit`, run plainly, under `acceltrain run` or `launch`; `--loop keras-dp`: plain Keras with DataParallel set
by hand) or as a hand-written jitted step over the same devices (`--loop hand`: the floor). Prints its per-step seconds as JSON on its last line (process 0's, under launch).

    python small_steps_script.py --model mlp --loop fit --steps 200
"""

import argparse
import json
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--model", choices=("mlp", "lstm", "bilstm"), default="mlp")
parser.add_argument("--loop", choices=("fit", "keras-dp", "hand"), default="fit")
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--job", metavar="COORDINATOR,PROCESSES,INDEX",
                    help="join a jax.distributed job by hand, without acceltrain (the plain 2-process job)")
args = parser.parse_args()
os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402

if args.job:  # as FACTS.md's 2-process recipe: gloo for CPU collectives, then initialize, before any device is used
    coordinator, count, index = args.job.split(",")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=int(count), process_id=int(index))
import keras  # noqa: E402
import numpy as np  # noqa: E402

BATCH = 32
VOCABULARY = 5000  # the bilstm's tokens


class MLP(keras.Model):
    """A subclassed MLP, as keras.io's guides write one."""

    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(64, activation="relu")
        self.out = keras.layers.Dense(10, activation="softmax")

    def call(self, x):
        return self.out(self.hidden(x))


def make_model():
    keras.utils.set_random_seed(0)
    if args.loop == "keras-dp":  # plain Keras's own data parallelism, set by hand: what acceltrain sets for it
        distribution = keras.distribution.DataParallel(devices=jax.devices())
        distribution.auto_shard_dataset = False  # each process passes its own share (below), as acceltrain's do
        keras.distribution.set_distribution(distribution)
    if args.model == "mlp":
        model, shape = MLP(), (32,)
    elif args.model == "lstm":
        model = keras.Sequential([keras.layers.LSTM(64), keras.layers.Dense(10, activation="softmax")])
        shape = (40, 16)
    else:  # issue 45's IMDB-shaped text classifier: an embedding, then two bidirectional LSTMs
        model = keras.Sequential([keras.Input((80,), dtype="int32"), keras.layers.Embedding(VOCABULARY, 32),
                                  keras.layers.Bidirectional(keras.layers.LSTM(32, return_sequences=True)),
                                  keras.layers.Bidirectional(keras.layers.LSTM(32)),
                                  keras.layers.Dense(10, activation="softmax")])
        shape = (80,)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model, shape


model, shape = make_model()
processes = jax.process_count()
samples = BATCH * args.steps
rng = np.random.default_rng(0)
x = rng.integers(0, VOCABULARY, (samples, *shape)) if args.model == "bilstm" else rng.random((samples, *shape),
                                                                                                 dtype=np.float32)
y = rng.integers(0, 10, samples)


class StepSeconds(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds = (time.perf_counter() - self.started) / args.steps


class OneStepAtATime(keras.callbacks.Callback):
    """Plain Keras over several CPU devices needs it: a batch end that is not async_safe makes fit wait for each step.
    Without it, Keras 3.15 lets steps overlap and a 2-process job here waits in gloo for ever (as acceltrain's
    backends/jax.py::_steps_must_not_overlap says; the MLP's keras-dp job hung 1 of 1 without it)."""

    def on_train_batch_end(self, batch, logs=None):
        pass


if args.loop in ("fit", "keras-dp"):
    timer = StepSeconds()
    share = slice(jax.process_index(), None, processes) if args.loop == "keras-dp" else slice(None)
    # The second epoch's steps; by hand, each process its every process-th sample, a batch of its share of 32.
    model.fit(x[share], y[share], batch_size=BATCH // (processes if args.loop == "keras-dp" else 1), epochs=2,
              verbose=0, callbacks=[timer, *([OneStepAtATime()] if args.loop == "keras-dp" and jax.device_count() > 1
                                             else [])])
    seconds = timer.seconds
else:
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    # Called, not build((None, *shape)): a subclassed model without a build method of its own makes no weights
    # there (Keras only warns), and the jitted step then trained nothing: no gradients, no all-reduce, no Adam,
    # the weights remade from their initializers inside each step (the MLP's floors before this were such a step).
    model(x[:BATCH])
    if not model.trainable_variables:
        raise SystemExit("the hand-written step has no weights to train: it would time a step that learns nothing")
    model.optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    split, whole = NamedSharding(mesh, PartitionSpec("batch")), NamedSharding(mesh, PartitionSpec())

    def loss_of(trainable, fixed, xb, yb):
        predicted, fixed = model.stateless_call(trainable, fixed, xb)
        return loss_fn(yb, predicted), fixed

    @jax.jit
    def step(trainable, fixed, slots, xb, yb):
        (loss, fixed), grads = jax.value_and_grad(loss_of, has_aux=True)(trainable, fixed, xb, yb)
        trainable, slots = model.optimizer.stateless_apply(slots, grads, trainable)
        return trainable, fixed, slots, loss

    state = jax.device_put(([v.value for v in model.trainable_variables],
                            [v.value for v in model.non_trainable_variables],
                            [v.value for v in model.optimizer.variables]), whole)
    local = BATCH // processes
    index = jax.process_index()

    def batch(i):  # this process's rows of global batch i (every process-th sample, as acceltrain shares them)
        rows = slice(i * BATCH + index, (i + 1) * BATCH, processes)
        return [jax.make_array_from_process_local_data(split, part[rows], (BATCH, *part.shape[1:]))
                for part in (x, y)]

    for epoch in range(2):
        started = time.perf_counter()
        for i in range(args.steps):
            *state, loss = step(*state, *batch(i))
            float(loss)  # each step finished, as Keras's fit waits for its logs on several CPU devices
        seconds = (time.perf_counter() - started) / args.steps
print(json.dumps({"step_seconds": seconds, "devices": jax.device_count(), "processes": processes}))
