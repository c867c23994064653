"""Write the tests' small slice of MNIST (tests/support.py::write_small_mnist) to the path given: a runnable block's
fast form trains on it (`python tests/scripts/small_mnist.py small.npz`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: `tests` importable

from tests.support import write_small_mnist  # noqa: E402

write_small_mnist(Path(sys.argv[1]))
