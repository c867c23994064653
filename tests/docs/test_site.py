"""The manual builds with every warning an error (`mkdocs build --strict`: no broken link, anchor or API
reference), and its search finds what people look for on the page that answers it. Needs the `docs` extra
(`pip install -e ".[docs]"`): skipped without it; .ci/run installs it and runs this file after the suite."""

import collections
import importlib.util
import json
import re
import subprocess
import sys

import pytest

from tests.support import REPO, env

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                                reason='needs the docs extra: pip install -e ".[docs]"')

# What a reader types, and the page that answers it (the page where the words occur most).
SEARCHES = {
    "TPU": {"guides/tpus/"},
    "Colab": {"guides/tpus/"},
    "out of memory": {"guides/big-models/"},
    "resume": {"guides/checkpoints/"},
    "LoRA": {"guides/big-models/", "guides/plan/"},  # fine-tuning it, and planning it
    "watchdog": {"concepts/watchdog/"},
    "SLURM": {"guides/clusters/"},
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)], cwd=REPO,
                           env=env(NO_MKDOCS_2_WARNING="1"), capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stderr[-4000:]}"
    return folder


def pages_by_hits(index: dict, words: str) -> list[tuple[str, int]]:
    """Pages of the search index, best first: a hit in a page's or a section's title counts ten (Material's
    search, lunr, ranks title matches far above text), one in its text one, times the page's own `search.boost`
    (front matter; Material multiplies a page's score by it)."""
    hits = collections.Counter()
    for entry in index["docs"]:
        count = lambda text: len(re.findall(re.escape(words.lower()), text.lower()))  # noqa: E731
        score = 10 * count(entry["title"]) + count(entry["text"])
        hits[entry["location"].split("#")[0]] += score * entry.get("boost", 1)
    return [(page, score) for page, score in hits.most_common() if score]


def test_the_search_finds_each_topic_on_the_page_that_answers_it(site):
    index = json.loads((site / "search" / "search_index.json").read_text())
    for words, pages in SEARCHES.items():
        found = pages_by_hits(index, words)
        assert found and found[0][0] in pages, f"searching {words!r} finds {found[:3]} first, not {pages}"


def test_the_api_reference_and_the_cli_reference_are_in_the_site(site):
    api = (site / "reference" / "python" / "index.html").read_text()
    for name in ("connect", "Runtime", "plan", "UsageError", "TrainingDiverged"):
        assert f'id="acceltrain.{name}"' in api, f"the Python API page lacks {name}"
    assert "--stall-timeout" in (site / "reference" / "cli" / "index.html").read_text()
