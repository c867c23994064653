"""The measured figures of README.md and the manual are made from the committed benchmark records, each tied to
its section.

A measured figure or sentence of README.md or of any docs/**/*.md page sits between
`<!-- measured:SECTION/NAME -->` and `<!-- /measured -->`; `python benchmarks/render.py` writes what is between
them from benchmarks/results/SECTION.json, through that section script's `quotes()`. A figure edited by
hand, or a record changed without rendering again, fails here. A decimal percentage or ratio outside the
markers (how a measurement reads) fails too, unless it is a test's bound listed in BOUNDS.
"""

import re

from benchmarks import render
from tests.support import REPO

# Figures that read like measurements but are the bounds a test asserts: where the test is.
BOUNDS = {
    "1/8 + 0.2 %": "tests/layout/test_placement.py (the first device's share of an fsdp model's weights)",
    "between 1 and 1.3 x": "tests/commands/test_plan.py (the plan's bytes over the training state)",
}
MEASURED_LOOKING = re.compile(r"\d+\.\d+\s?(?:%|×|x\b)")


def test_readme_and_docs_hold_what_the_committed_records_render():
    for path, text in render.rendered().items():
        if path != render.BENCHMARKS_MD:
            assert path.read_text() == text, (f"{path.relative_to(REPO)}'s measured figures differ from what "
                                              "benchmarks/results/ gives: run `python benchmarks/render.py`")


def test_the_manual_quotes_each_benchmark_it_reports():
    quoted = {section for path in render.documents() if path.exists()
              for section, _ in re.findall(r"<!-- measured:([\w-]+)/([\w-]+) -->", path.read_text())}
    assert {"learning-rate", "epoch-speed", "checkpoint-cost", "sharding-memory", "plan-cost", "stress-simulated",
            "corpus"} <= quoted


def unquoted(text: str) -> str:
    """The text outside the measured markers and code blocks, less the listed test bounds."""
    text = render.MARKER.sub("", text)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for bound in BOUNDS:
        text = text.replace(bound, "")
    return text


def test_no_figure_that_reads_as_measured_is_typed_outside_the_markers():
    for path in render.documents():
        if path.exists():
            typed = MEASURED_LOOKING.findall(unquoted(path.read_text()))
            assert not typed, (f"{path.relative_to(REPO)} types {typed}: quote it from its benchmark's record "
                               "(<!-- measured:SECTION/NAME -->), or list a test's bound in BOUNDS")


def test_the_pattern_finds_percentages_and_ratios_not_settings():
    assert MEASURED_LOOKING.findall("98.3 %, 1.033× the loop, 0.39x, 12.5% but 2e-3, 1200, 80 %, 8.49 T") == [
        "98.3 %", "1.033×", "0.39x", "12.5%"]
    assert unquoted("a <!-- measured:x/y -->98.3 %<!-- /measured --> b\n```\n1.5 x\n```\n") == "a  b\n\n"
