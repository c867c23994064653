"""`--tensorboard`: Keras's TensorBoard callback, writing under OUT/tensorboard.

Keras writes TensorBoard events through `tensorflow.summary`, on every backend: a JAX-only install
(or TensorFlow without the tensorboard package) cannot write them, so that is checked before training starts, with what to install.
"""

import importlib.util
from pathlib import Path

from acceltrain.errors import AcceltrainError

SUBFOLDER = "tensorboard"


def check_available() -> None:
    """Raise, before any training, if TensorBoard event files cannot be written here."""
    missing = [name for name in ("tensorflow", "tensorboard") if not _installed(name)]
    if missing:
        raise AcceltrainError(
            f"--tensorboard was given, but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not "
            "installed: Keras writes TensorBoard logs with tensorflow.summary, which needs both, on every "
            f"backend. Install {'it' if len(missing) == 1 else 'them'} (`pip install {' '.join(_PIP[m] for m in missing)}`, "
            "fine beside JAX), or leave out --tensorboard."
        )


_PIP = {"tensorflow": "tensorflow-cpu", "tensorboard": "tensorboard"}


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ValueError:  # set to None in sys.modules: there, but blocked from importing
        return False


def callback(out_dir: str | Path):
    """Keras's TensorBoard callback writing to OUT/tensorboard: per-epoch scalars, no graph, no profile."""
    import keras

    # write_graph traces a TensorFlow graph, which a JAX model does not have.
    return keras.callbacks.TensorBoard(log_dir=str(Path(out_dir) / SUBFOLDER), write_graph=False)
