"""The seed's job: an MLP on MNIST (784 → 512-256-128-64 relu → 10 softmax, RMSprop).

What changed from the seed, and why:
- labels stay integers, matching the sparse loss (the seed fed one-hot labels to a sparse loss);
- every epoch sees all 60,000 samples: 50 steps of a global batch of 1200 (the seed's
  `steps_per_epoch=50` with no batch size trained on 32 × 50 samples an epoch);
- the learning rate decays (cosine) from 2e-3 to 0: the seed's constant 1e-2 diverged on some seeds
  (BENCHMARKS.md, section learning-rate, written by benchmarks/learning_rate.py). `learning_rate=1e-2`
  trains at the seed's constant rate, with the changes above.
"""

import numpy as np

NAME = "mnist-mlp"
EPOCHS = 20
BATCH_SIZE = 1200
PEAK_LEARNING_RATE = 2e-3
NUM_CLASSES = 10


def preprocess(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Images flattened to 784 and scaled to [0, 1]; labels as integers."""
    x = x.reshape(len(x), -1).astype(np.float32) / 255.0
    return x, y.astype(np.int32)


def build_model(*, learning_rate: float | None = None, total_steps: int = EPOCHS * 50):
    """The seed's MLP, compiled. `learning_rate=None` uses the cosine schedule; a number is constant."""
    import keras

    model = keras.Sequential(
        [keras.Input(shape=(784,))]
        + [keras.layers.Dense(units, activation="relu") for units in (512, 256, 128, 64)]
        + [keras.layers.Dense(NUM_CLASSES, activation="softmax")],
        name="mnist_mlp",
    )
    if learning_rate is None:
        learning_rate = keras.optimizers.schedules.CosineDecay(PEAK_LEARNING_RATE, decay_steps=total_steps)
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model
