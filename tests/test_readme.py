"""README quotes measurements only from BENCHMARKS.md, which the benchmark scripts write.

Which README numbers count: every figure with a unit of measurement (%, ×, s) inside a section marked
`<!-- measured:begin ... -->` ... `<!-- measured:end -->`. Each must appear in BENCHMARKS.md (as the
same digits; "81 %" in README matches "81%" there). Settings (2e-3, seeds 0-4, batch 1200) carry no
unit and are not measurements.
"""

import re

from tests.support import REPO

FIGURE = re.compile(r"(\d+(?:\.\d+)?)(?:\s*[-–]\s*(\d+(?:\.\d+)?))?\s*(%|×|s\b)")
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def measured_sections(text: str) -> list[str]:
    return re.findall(r"<!-- measured:begin.*?-->(.*?)<!-- measured:end -->", text, re.S)


def figures(section: str) -> list[str]:
    return [number for match in FIGURE.finditer(section) for number in match.groups()[:2] if number]


def test_every_measured_figure_in_readme_is_in_benchmarks():
    readme, benchmarks = (REPO / "README.md").read_text(), (REPO / "BENCHMARKS.md").read_text()
    sections = measured_sections(readme)
    assert len(sections) >= 2, "README's measured sections are marked"
    known = set(NUMBER.findall(benchmarks))
    quoted = [figure for section in sections for figure in figures(section)]
    assert len(quoted) >= 8
    missing = [figure for figure in quoted if figure not in known]
    assert not missing, f"README quotes {missing}, which BENCHMARKS.md does not hold"


def test_the_figure_pattern_finds_ranges_percentages_and_ratios():
    assert figures("98.3-98.4 %, 1.035× the loop, 9.8 % and 10.3 %, by 36 % in 4.3 s, seeds 0-4, 2e-3") == [
        "98.3", "98.4", "1.035", "9.8", "10.3", "36", "4.3"]
