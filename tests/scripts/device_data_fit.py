"""Runtime.fit on in-memory arrays in a job of several processes, at a tiny size, twice from the same seed: on device
data, then on Keras's input path (Runtime.keep_data_on_devices("off")). Adam with metrics=["accuracy"], an odd sample
count (the arrays' rules leave out the last few), shuffled, validation_data; then evaluate. Under `acceltrain launch`
each process places its own share on its devices (the first fit); prints, for each fit, its global metrics and a
digest of the trained weights, with every digit.

    acceltrain launch --processes 2 --simulate-devices 2 device_data_fit.py [callbacks | callback-list | one-loop]

`callbacks`: a callback with a batch hook (one step an execution, each batch's logs heard). `callback-list`: the same
callback in a keras.callbacks.CallbackList the script built (with Keras's History), as a caller that configures its
callbacks itself passes them. `one-loop`: the steps of
an execution in one compiled loop, as on an accelerator (decisions.choose_step_loop's answer there; CPU's is a program
a step).
"""

import sys

import numpy as np

import acceltrain

if sys.argv[1:] == ["one-loop"]:
    from acceltrain import decisions

    decisions.choose_step_loop = lambda platform, devices: (True, "one-loop: the steps in one compiled loop a dispatch")
runtime = acceltrain.connect()
import keras  # noqa: E402  (after connect: it sets the backend)

rng = np.random.default_rng(0)
x = rng.normal(size=(1001, 12)).astype("float32")
y = (x[:, :3].sum(axis=1) > 0).astype("int64") + (x[:, 3] > 1)


def fit(setting: str) -> str:
    runtime.keep_data_on_devices(setting)
    runtime.seed(0)
    with runtime.scope():
        model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(3, activation="softmax")])
        model.compile(keras.optimizers.Adam(1e-2), "sparse_categorical_crossentropy", metrics=["accuracy"])
    heard = []
    callbacks = [keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: heard.append(batch))] \
        if sys.argv[1:] in (["callbacks"], ["callback-list"]) else []
    if sys.argv[1:] == ["callback-list"]:
        callbacks = keras.callbacks.CallbackList(callbacks, add_history=True, model=model, verbose=0, epochs=3)
    history = runtime.fit(model, x, y, batch_size=64, epochs=3, validation_data=(x[:200], y[:200]), verbose=0,
                          callbacks=callbacks)
    test = runtime.evaluate(model, x[:400], y[:400], batch_size=80, verbose=0)
    digest = sum(float(np.abs(np.asarray(w, np.float64)).sum()) for w in model.get_weights())
    return (f"processes {runtime.num_processes} loss {history.history['loss'][-1]!r} "
            f"accuracy {history.history['accuracy'][-1]!r} val_loss {history.history['val_loss'][-1]!r} "
            f"test {test['accuracy']!r} weights {digest!r} batches heard {len(heard)}")


print("device data:", fit("auto"), flush=True)
print("keras's path:", fit("off"))
