"""The noise rule every benchmark section that compares uses (benchmarks/_noise.py): a ratio is stated as an
effect only beyond the spread of the run's own repeated measurements; a treatment that only adds work and
comes out faster makes the run inconclusive, and no ratio is printed for it."""

import pytest

from benchmarks import _noise


@pytest.mark.parametrize("values, expected", [
    ([1.0, 1.1], 0.1),
    ([2.0, 2.0, 2.0], 0.0),
    ([1.0], None),  # one measurement: no spread
    ([], None),
    ([1.0, None, 1.2], 0.2),  # what was not recorded does not count
])
def test_spread_is_max_over_min_less_one(values, expected):
    assert _noise.spread(values) == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize("ratio, spreads, adds_work, verdict", [
    # beyond the noise, either way, for a treatment that may go either way
    (1.20, (0.05, 0.10), False, _noise.HIGHER),
    (0.80, (0.05, 0.10), False, _noise.LOWER),
    # within the larger of the two spreads: no difference shown
    (1.08, (0.05, 0.10), False, _noise.WITHIN),
    (0.92, (0.10, 0.05), False, _noise.WITHIN),
    # a spread not measured: the noise is unknown, the ratio is stated with that said
    (1.20, (None, 0.05), False, _noise.UNKNOWN),
    (0.80, (None,), False, _noise.UNKNOWN),
    # a treatment that only adds work (a checkpoint, a callback)
    (1.50, (0.05, 0.05), True, _noise.HIGHER),
    (0.97, (0.05, 0.05), True, _noise.WITHIN),  # faster, but within the noise: no difference shown
    (0.76, (0.05, 0.05), True, _noise.INCONCLUSIVE),  # faster beyond the noise: the load set the figures
    (0.88, (None, None), True, _noise.INCONCLUSIVE),  # faster with no noise to tell
    (1.82, (None, None), True, _noise.UNKNOWN),
])
def test_judge_table(ratio, spreads, adds_work, verdict):
    assert _noise.judge(ratio, spreads, adds_work=adds_work).verdict == verdict


def test_compare_judges_the_medians_against_both_spreads():
    control, treatment = [10.0, 10.2, 10.1], [12.0, 12.1, 11.9]
    found = _noise.compare(control, treatment, adds_work=True)
    assert found.ratio == pytest.approx(12.0 / 10.1) and found.noise == pytest.approx(0.2 / 10.0)  # the control spread more
    assert found.verdict == _noise.HIGHER and found.shown
    # The checkpoint-cost section's old figures: checkpointed epochs 24 % faster than none's.
    assert _noise.compare([14.9, 14.8], [11.3, 11.4], adds_work=True).verdict == _noise.INCONCLUSIVE


def test_what_each_verdict_says():
    assert _noise.judge(1.5, (0.04, 0.02)).says() == "1.50× (beyond this run's noise, ±4%)"
    assert _noise.judge(1.033, (0.13, 0.0)).says("{:.3f}×") == \
        "1.033× (within this run's noise, ±13%: no difference shown)"
    assert _noise.judge(0.79, (None,)).says() == "0.79× (noise unknown)"
    inconclusive = _noise.judge(0.761, (None, None), adds_work=True)
    assert not inconclusive.shown
    assert inconclusive.says().startswith("inconclusive") and "0.76" not in inconclusive.says()
