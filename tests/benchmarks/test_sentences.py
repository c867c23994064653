"""What the benchmark scripts write in words follows their own figures: the same function, other figures,
other sentences."""

import importlib.util
import sys

import pytest

from tests.support import REPO


def _script(name: str):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(f"benchmark_{name}", REPO / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


@pytest.fixture(scope="module")
def learning_rate():
    return _script("learning_rate")


@pytest.fixture(scope="module")
def epoch_speed():
    return _script("epoch_speed")


def test_learning_rate_findings_follow_the_table(learning_rate):
    rows = [("A", [0.098, 0.978, 0.103], [0, 2]), ("B", [0.983, 0.984, 0.984], []), ("C", [0.984, 0.984, 0.985], [])]
    said = learning_rate.findings(rows, [0, 1, 2])
    assert "A diverged on 2 of 3 seeds (seed 0, seed 2)." in said
    assert "98.4 %, is C's" in said and "every seed: C." in said
    calm = learning_rate.findings([("A", [0.98, 0.97], []), ("B", [0.97, 0.98], [])], [0, 1])
    assert "No setting diverged" in calm and "every seed" not in calm and "A and B" in calm


@pytest.mark.parametrize("jit, fraction, says", [
    (False, 0.74, "without XLA (Keras resolved its `jit_compile='auto'` to False) and reached 74%"),
    (True, 0.5, "with XLA (Keras resolved its `jit_compile='auto'` to True) and reached 50%"),
    (None, 0.5, "ran and reached 50%"),
])
def test_epoch_speed_says_what_plain_keras_ran_with(epoch_speed, jit, fraction, says):
    report = {"variants": {"plain": {"fraction_of_ceiling": fraction, "jit_compile": jit, "backend": "tensorflow"}}}
    said = epoch_speed.why_plain_is_hard_to_beat(report)
    assert says in said and f"{1 / fraction:.2f}× faster" in said and "FACTS" not in said
