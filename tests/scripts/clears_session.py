"""A TensorFlow script that calls keras.backend.clear_session() between two models (as keras.io's TensorFlow NumPy
example does), then keras.utils.clear_session(); prints the strategy and replicas each model was built under.
python clears_session.py  (tests/commands/test_run.py)"""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import keras  # noqa: E402
import numpy as np  # noqa: E402


def model():
    made = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    made.compile("sgd", "mse")
    made.fit(np.ones((8, 3), "float32"), np.ones((8, 1), "float32"), batch_size=8, verbose=0)
    strategy = made.distribute_strategy
    return f"{type(strategy).__name__} {strategy.num_replicas_in_sync}"


print("before:", model())
keras.backend.clear_session()
print("after clear_session:", model())
keras.utils.clear_session()
print("after utils.clear_session:", model())
