"""The job benchmarks/preemption.py interrupts: a plain Keras script (a small MLP, 6 epochs of 38 steps), run by
`acceltrain run --checkpoint-dir`. With PREEMPT_AT=S and PREEMPT_SIGNAL=NAME it sends NAME to itself as global step
S begins (certain to land there): SIGTERM, a notice; SIGKILL, a preemption with none. Prints "killed at S"."""

import os
import signal

import keras
import numpy as np

AT = int(os.environ.get("PREEMPT_AT", "-1"))
SIGNAL = getattr(signal, os.environ.get("PREEMPT_SIGNAL", "SIGTERM"))

keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.normal(size=(1216, 32)).astype("float32")
y = (x[:, :4].argmax(axis=1)).astype("int64")
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(4)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class PreemptAt(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == AT:
            print(f"killed at {AT}", flush=True)
            os.kill(os.getpid(), SIGNAL)


model.fit(x, y, batch_size=32, epochs=6, callbacks=[PreemptAt()], verbose=0)
