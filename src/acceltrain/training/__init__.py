"""The training loop around Keras's fit: checkpoints and exact resume, callbacks, progress, TensorBoard.

These modules import keras at module level: import them only after connect() has chosen the backend."""
