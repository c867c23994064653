"""Counts how many times the job computes each training sample, and how many times each process reads it: a layer adds
each batch's one-hot sample ids into a non-trainable weight (summed over the global batch, so the count is the whole
job's); the input counts each sample where it is read (a tf.data map right after the source, a PyDataset's
__getitem__, a Grain source's __getitem__), in this process.
    python counts_samples.py KINDS [EPOCHS] [SAMPLES] [SLEEP] [evaluate]
KINDS: tfdata,pydataset,grain,grain_by_process,arrays (in-memory arrays, batch 32, shuffled: not counted as read).
For each kind, a fresh model: prints "seen KIND: [...]" (each sample's count), "read KIND: [...]" (each sample's
reads in this process) and "metrics: {...}" (the last kind's). SLEEP: seconds each batch takes more (a run slow
enough to be stopped midway). "evaluate": after the fit, the same input unshuffled is passed to evaluate, predict and
as fit's validation_data (fit on the arrays), each printing "read-CALL KIND: [...]" (this process's reads), and
"same-CALL KIND: true/false" (its metrics, its predictions in order, as the same call on the arrays gives)."""

import json
import math
import sys
import time

import keras
import numpy as np

kinds = sys.argv[1].split(",")
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
samples = int(sys.argv[3]) if len(sys.argv) > 3 else 320
sleep = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
evaluating = len(sys.argv) > 5 and sys.argv[5] == "evaluate"
batch = 32
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.random((samples, 4), dtype=np.float32)
y = (x.sum(1) > 2).astype("int32")
ids = np.arange(samples, dtype="int32")
read = np.zeros(samples, dtype="int64")  # this process's reads of each sample, where the input reads it


def note_read(which):
    np.add.at(read, np.asarray(which, dtype="int64"), 1)
    return which


class Seen(keras.layers.Layer):
    def build(self, shape):
        self.seen = self.add_weight(shape=(samples,), initializer="zeros", trainable=False, name="seen")

    def call(self, inputs, training=False):
        features, which = inputs
        if training:
            self.seen.assign(self.seen + keras.ops.sum(keras.ops.one_hot(which, samples), axis=0))
        return features


class Batches(keras.utils.PyDataset):
    def __len__(self):
        return math.ceil(samples / batch)

    def __getitem__(self, i):
        cut = slice(i * batch, (i + 1) * batch)
        note_read(ids[cut])
        return {"x": x[cut], "id": ids[cut]}, y[cut]


def jax_processes():
    import jax

    return jax.process_count()


def make_inputs(kind, shuffle=True):
    if kind == "tfdata":
        import tensorflow as tf

        def noted(features, label):
            features["id"] = tf.py_function(note_read, [features["id"]], tf.int32)
            features["id"].set_shape(())
            return features, label

        inputs = tf.data.Dataset.from_tensor_slices(({"x": x, "id": ids}, y)).map(noted)
        inputs = (inputs.shuffle(samples, seed=1) if shuffle else inputs).batch(batch)
    elif kind == "pydataset":
        inputs = Batches()
    elif kind == "arrays":
        inputs = ({"x": x, "id": ids}, y)
    elif kind in ("grain", "grain_by_process"):  # the second reads only its process's records (16 a batch each)
        import grain.python as grain

        class Source:
            def __len__(self):
                return samples

            def __getitem__(self, i):
                note_read([i])
                return {"x": x[i], "id": ids[i]}, y[i]

        by_process = kind == "grain_by_process" and jax_processes() > 1
        shards = grain.ShardByJaxProcess(drop_remainder=True) if by_process else grain.NoSharding()
        sampler = grain.IndexSampler(num_records=samples, shard_options=shards, shuffle=shuffle, seed=1, num_epochs=1)
        inputs = grain.DataLoader(data_source=Source(), sampler=sampler, shard_options=shards, worker_count=0,
                                  operations=[grain.Batch(batch // jax_processes(), drop_remainder=False)])
    else:
        raise SystemExit(f"unknown kind {kind}")
    return inputs


def evaluate(kind, model):
    """evaluate, predict and validation_data on the unshuffled input: this process's reads of each sample, and
    whether each gives what the same call on the arrays gives."""
    arrays = {"x": x, "id": ids}
    fit = lambda validation: model.fit(arrays, y, batch_size=batch, epochs=1, verbose=0, shuffle=False,  # noqa: E731
                                       validation_data=validation).history["val_loss"]
    calls = {"evaluate": (lambda s: model.evaluate(s, verbose=0), lambda: model.evaluate(arrays, y, batch, verbose=0)),
             "predict": (lambda s: model.predict(s, verbose=0), lambda: model.predict(arrays, batch, verbose=0)),
             "validation": (fit, lambda: fit((arrays, y)))}
    state = lambda: [v.numpy() for v in model.variables + model.optimizer.variables]  # noqa: E731
    for name, (streamed, on_arrays) in calls.items():
        before = state()
        read[:] = 0
        got = streamed(make_inputs(kind, shuffle=False))
        print(f"read-{name} {kind}:", json.dumps(read.tolist()), flush=True)
        for variable, value in zip(model.variables + model.optimizer.variables, before):
            variable.assign(value)
        expected = on_arrays()
        print(f"same-{name} {kind}:", json.dumps(bool(np.allclose(got, expected, rtol=1e-5, atol=1e-6))), flush=True)


def train(kind):
    features, which = keras.Input((4,), name="x"), keras.Input((), dtype="int32", name="id")
    hidden = keras.layers.Dense(8, activation="relu")(Seen()((features, which)))
    model = keras.Model({"x": features, "id": which}, keras.layers.Dense(2, activation="softmax")(hidden))
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    inputs = make_inputs(kind)

    slowly = [keras.callbacks.LambdaCallback(on_train_batch_end=lambda *_, **__: time.sleep(sleep))] if sleep else []
    read[:] = 0
    given = {"x": inputs[0], "y": inputs[1], "batch_size": batch} if kind == "arrays" else {"x": inputs}
    history = model.fit(**given, epochs=epochs, verbose=0, callbacks=slowly)
    seen = next(layer for layer in model.layers if isinstance(layer, Seen)).seen.numpy()
    print(f"seen {kind}:", json.dumps([int(count) for count in np.rint(seen)]))
    print(f"read {kind}:", json.dumps(read.tolist()), flush=True)
    if evaluating:
        evaluate(kind, model)
    return history


for kind in kinds:
    history = train(kind)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "accuracy": history.history["accuracy"][-1]}))
