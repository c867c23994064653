"""Counts how many times the job computes each training sample, and how many times each process reads it: a layer adds
each batch's one-hot sample ids into a non-trainable weight (summed over the global batch, so the count is the whole
job's); the input counts each sample where it is read (a tf.data map right after the source, a PyDataset's
__getitem__, a Grain source's __getitem__), in this process.
    python counts_samples.py KINDS [EPOCHS] [SAMPLES] [SLEEP]   KINDS: tfdata,pydataset,grain,grain_by_process
For each kind, a fresh model: prints "seen KIND: [...]" (each sample's count), "read KIND: [...]" (each sample's
reads in this process) and "metrics: {...}" (the last kind's). SLEEP: seconds each batch takes more (a run slow
enough to be stopped midway)."""

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


def train(kind):
    features, which = keras.Input((4,), name="x"), keras.Input((), dtype="int32", name="id")
    hidden = keras.layers.Dense(8, activation="relu")(Seen()((features, which)))
    model = keras.Model({"x": features, "id": which}, keras.layers.Dense(2, activation="softmax")(hidden))
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])

    if kind == "tfdata":
        import tensorflow as tf

        def noted(features, label):
            features["id"] = tf.py_function(note_read, [features["id"]], tf.int32)
            features["id"].set_shape(())
            return features, label

        inputs = (tf.data.Dataset.from_tensor_slices(({"x": x, "id": ids}, y)).map(noted)
                  .shuffle(samples, seed=1).batch(batch))
    elif kind == "pydataset":
        inputs = Batches()
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
        sampler = grain.IndexSampler(num_records=samples, shard_options=shards, shuffle=True, seed=1, num_epochs=1)
        inputs = grain.DataLoader(data_source=Source(), sampler=sampler, shard_options=shards, worker_count=0,
                                  operations=[grain.Batch(batch // jax_processes(), drop_remainder=False)])
    else:
        raise SystemExit(f"unknown kind {kind}")

    slowly = [keras.callbacks.LambdaCallback(on_train_batch_end=lambda *_, **__: time.sleep(sleep))] if sleep else []
    read[:] = 0
    history = model.fit(inputs, epochs=epochs, verbose=0, callbacks=slowly)
    seen = next(layer for layer in model.layers if isinstance(layer, Seen)).seen.numpy()
    print(f"seen {kind}:", json.dumps([int(count) for count in np.rint(seen)]))
    print(f"read {kind}:", json.dumps(read.tolist()), flush=True)
    return history


for kind in kinds:
    history = train(kind)
print("metrics:", json.dumps({"loss": history.history["loss"][-1], "accuracy": history.history["accuracy"][-1]}))
