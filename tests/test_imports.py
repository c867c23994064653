"""Import invariants: acceltrain, its CLI and its config code start no framework (a `--help` or a config
check stays instant, and connect() alone chooses Keras's backend)."""

import pytest

from tests import support

FRAMEWORKS = ("jax", "tensorflow", "keras")


@pytest.mark.parametrize("module", ["acceltrain", "acceltrain.cli", "acceltrain.commands.config", "acceltrain.inputs"])
def test_importing_loads_no_framework(module):
    code = (f"import sys, {module}\n"
            f"print(sorted(name for name in {FRAMEWORKS!r} if name in sys.modules))")
    done = support.python("-c", code, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"importing {module} loaded {done.stdout.strip()}"
