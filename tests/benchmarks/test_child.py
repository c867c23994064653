"""benchmarks/_child.py: a variant measured in its own process, the variants interleaved round by round."""

import pytest

from benchmarks import _child

CHILD = "import json, sys\nsettings = json.loads(sys.argv[1])\nprint('noise')\nprint(json.dumps({'twice': 2 * settings['n']}))\n"


def test_a_child_gives_the_json_of_its_last_line():
    assert _child.run(CHILD, {"n": 21}, timeout=60) == {"twice": 42}


def test_a_failing_child_raises_with_the_end_of_its_stderr():
    with pytest.raises(RuntimeError, match="ValueError: broken"):
        _child.run("raise ValueError('broken')", {}, timeout=60)


def test_variants_are_measured_in_turn_round_by_round():
    order = []
    variants = {"a": {"label": "A", "settings": {"n": 1}, "runs": []},
                "b": {"label": "B", "settings": {"n": 2}, "runs": []}}
    _child.interleaved(variants, 2, lambda settings: order.append(settings["n"]) or {"n": settings["n"]})
    assert order == [1, 2, 1, 2]
    assert variants["a"]["runs"] == [{"n": 1}, {"n": 1}] and variants["b"]["runs"] == [{"n": 2}, {"n": 2}]
