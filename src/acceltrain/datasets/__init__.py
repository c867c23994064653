"""Data on disk in the keras.datasets layout, and the MNIST copy that ships with acceltrain."""

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from acceltrain.errors import UsageError

KEYS = ("x_train", "y_train", "x_test", "y_test")
MNIST_PATH = Path(__file__).with_name("mnist.npz")  # CC BY-SA 3.0, see MNIST-LICENSE.md beside it


@dataclass(frozen=True)
class Splits:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_npz(path: str | Path = MNIST_PATH) -> Splits:
    """Load an .npz holding x_train, y_train, x_test, y_test, as stored (no preprocessing)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"Received data path {str(path)!r}, which is not a file. Pass --data FILE.npz with "
                         f"the arrays {', '.join(KEYS)} (the keras.datasets layout).")
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [key for key in KEYS if key not in npz.files]
            if missing:
                raise UsageError(
                    f"Data file {str(path)!r} lacks {', '.join(missing)} (it holds: "
                    f"{', '.join(npz.files) or 'nothing'}). Save it with "
                    "np.savez(path, x_train=..., y_train=..., x_test=..., y_test=...)."
                )
            splits = Splits(*(npz[key] for key in KEYS))
    except UsageError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise UsageError(f"Could not read data file {str(path)!r} as .npz ({error}). Pass a file written by "
                         "np.savez or np.savez_compressed.") from None
    for split in ("train", "test"):
        x, y = getattr(splits, f"x_{split}"), getattr(splits, f"y_{split}")
        if len(x) != len(y):
            raise UsageError(f"Data file {str(path)!r}: x_{split} has {len(x)} samples but y_{split} has "
                             f"{len(y)}. Each sample needs exactly one label.")
    return splits
