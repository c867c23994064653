"""A script written with acceltrain's library API: connect(), scope(), Runtime.fit and evaluate.

Under `acceltrain launch --processes 2`, connect() finds the job from the environment the launcher sets.
Prints the process's view and the global metrics.
"""

import acceltrain

runtime = acceltrain.connect()
import keras  # noqa: E402  (after connect: it sets the backend)

from acceltrain.datasets import load_npz  # noqa: E402

splits = load_npz()
x = splits.x_train[:2400].reshape(-1, 784).astype("float64") / 255  # float64 on purpose: cast once
y = splits.y_train[:2400].astype("int64")
runtime.seed(0)
with runtime.scope():
    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
history = runtime.fit(model, x, y, batch_size=240, epochs=2, validation_data=(x[:500], y[:500]), verbose=0,
                      shuffle=False)  # the same global batches on any process count, to compare
test = runtime.evaluate(model, x[:1000], y[:1000], batch_size=240, verbose=0)
print(f"processes {runtime.num_processes} replicas {runtime.num_replicas} "
      f"val_loss {history.history['val_loss'][-1]:.6f} accuracy {test['accuracy']:.6f}")
