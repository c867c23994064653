"""report.html opened in a real browser: headless Chromium from the system's packages (Debian's `chromium`, which
.ci/run installs), its DOM after loading read back for what a person sees: the test's figures, the picture decoded,
the banner's decisions, the ledger, the per-epoch table and the config to rerun the job."""

import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from acceltrain.commands import report
from tests.commands.test_report import LEDGER, METRICS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here: apt-get install chromium (.ci/run does)")


class _Seen(HTMLParser):
    """The DOM Chromium dumped: each element's text by id, the headings, the table cells, the image's attributes."""

    def __init__(self):
        super().__init__()
        self.by_id, self.headings, self.cells, self.items, self.images = {}, [], [], [], []
        self._open = []  # (tag, id) of the elements the text is inside

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs)
            return
        self._open.append((tag, attrs.get("id")))
        if attrs.get("id"):
            self.by_id.setdefault(attrs["id"], "")
        if tag in ("h1", "h2", "td", "th", "li"):
            {"h": self.headings, "t": self.cells, "l": self.items}[tag[0]].append("")

    def handle_endtag(self, tag):
        while self._open and self._open.pop()[0] != tag:
            pass

    def handle_data(self, text):
        for tag, element in self._open:
            if element:
                self.by_id[element] += text
        inside = [tag for tag, _ in self._open]
        for tags, texts in ((("h1", "h2"), self.headings), (("td", "th"), self.cells), (("li",), self.items)):
            if any(tag in inside for tag in tags):
                texts[-1] += text


def _opened_in_chromium(page, tmp_path) -> _Seen:
    profile = tmp_path / "chromium-profile"  # a fresh one: nothing of another run's state
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "<body" in done.stdout, done.stderr[-2000:]
    seen = _Seen()
    seen.feed(done.stdout)
    return seen


def test_a_browser_shows_the_report_the_curves_the_test_figures_decisions_ledger_and_config(tmp_path):
    (tmp_path / "config.toml").write_text('recipe = "mnist-mlp"\nepochs = 3\nbatch_size = 240\nvalidation_split = 0.1\n')
    metrics = {**METRICS, "ledger": LEDGER, "job": "mnist-mlp, 3 epochs of 225 steps at global batch 240; validation: "
                                                    "the last 6,000 of the 60,000 training samples held out"}
    report.write(tmp_path, metrics)

    seen = _opened_in_chromium(tmp_path / "report.html", tmp_path)

    assert seen.headings == ["Run report", "Decisions and why", "Where the time went", "Timings", "Per epoch",
                             "Hardware", "The config, to run the job again"]
    assert seen.by_id["result"].startswith("test accuracy 0.9100 (last epoch: training 0.9000, validation 0.8800)")
    [plots] = seen.images
    assert int(plots["data-decoded-width"]) == report.figure(metrics).get_size_inches()[0] * 110  # decoded, dpi 110
    assert "training and validation" in plots["alt"]
    assert seen.items[:3] == [f"job: {metrics['job']}", "backend: jax (the default)",
                              "distribution: DataParallel (8 devices: each takes a slice of every batch)"]
    assert ["device steps", "8.00", "40 %"] == seen.cells[seen.cells.index("device steps"):][:3]
    assert ["wall time", "20.00", "100 %"] == seen.cells[seen.cells.index("wall time"):][:3]
    assert ["3", "0.9000", "0.4000", "0.8800", "0.4500", "0.25"] == seen.cells[seen.cells.index("3"):][:6]
    assert 'validation_split = 0.1' in seen.by_id["config-toml"]
