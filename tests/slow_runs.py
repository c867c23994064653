"""When each slow test last ran. CI runs none of them (`-m 'not slow'`), so the validation page says, for each
slow test it names, when `pytest -m slow` last ran it, on which commit, and how it ended; and beside each claim
that rests on a slow test with no recorded pass, "not run yet".

A run that selects slow tests records them in tests/slow-runs.json as it ends (this plugin, registered by
tests/conftest.py; with xdist, only the controller writes). `python -m tests.slow_runs` rewrites the table
between docs/validation.md's `<!-- slow-runs -->` markers from that record, and "not run yet" beside each slow test
it or another page (README.md, docs/) cites with no recorded pass; tests/docs/test_pages.py fails when a page
differs from it. Commit both after a slow run, as benchmark records are.
"""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RECORD = Path(__file__).resolve().with_name("slow-runs.json")
VALIDATION = REPO / "docs" / "validation.md"
SECTION = re.compile(r"(<!-- slow-runs -->\n)(?P<table>.*?)(<!-- /slow-runs -->)", re.S)
SLOW_REFERENCE = re.compile(r"`(tests/[\w/]+\.py::\w+)` \(((?:partly )?slow)\)")


LEFT_OUT = "acceltrain-slow-cases-left-out"  # the key of a worker's counts in xdist's workeroutput


class Recorder:
    """Each slow test function's cases as they end; written to RECORD when the session ends."""

    def __init__(self):
        self.outcomes = {}  # "tests/file.py::name" → the outcomes of its cases
        self.deselected = {}  # "tests/file.py::name" → its slow cases a -k or -m left out (a part of it ran)

    def pytest_deselected(self, items):
        for item in items:
            if item.get_closest_marker("slow"):
                name = item.nodeid.split("[")[0]
                self.deselected[name] = self.deselected.get(name, 0) + 1

    def pytest_collection_finish(self, session):
        """Cases left out by naming others by id (tests/x.py::t[case]) are never collected, so never deselected: the
        rest of each slow test's cases, from its own parametrization, count as left out (a run of one corpus case by
        id once recorded the whole matrix as passed)."""
        ran = {}
        for item in session.items:
            if item.get_closest_marker("slow") and "[" in item.nodeid:
                name = item.nodeid.split("[")[0]
                ran.setdefault(name, [item, 0])[1] += 1
        for name, (item, selected) in ran.items():
            cases = sum(1 for case in item.parent.collect() if getattr(case, "originalname", None) == item.originalname
                        and case.get_closest_marker("slow"))
            left_out = cases - selected - self.deselected.get(name, 0)
            if left_out > 0:
                self.deselected[name] = self.deselected.get(name, 0) + left_out

    def pytest_runtest_logreport(self, report):
        if "slow" in report.keywords and (report.when == "call" or report.outcome != "passed"):
            self.outcomes.setdefault(report.nodeid.split("[")[0], []).append(report.outcome)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        """Under xdist the workers collect and deselect, the controller records: each worker's count of the cases
        left out (every worker collects them all, so they agree) reaches it here. Without this a -k run of some
        cases under -n 2 was recorded as all of them passing."""
        for name, left_out in getattr(node, "workeroutput", {}).get(LEFT_OUT, {}).items():
            self.deselected[name] = max(self.deselected.get(name, 0), left_out)

    def pytest_sessionfinish(self, session):
        if hasattr(session.config, "workerinput"):  # an xdist worker: its count of cases left out goes home
            session.config.workeroutput[LEFT_OUT] = self.deselected
        if self.outcomes and not hasattr(session.config, "workerinput"):
            record = load()
            before = dict(record)
            finished, commit = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), _commit()
            for name, outcomes in self.outcomes.items():
                ended = "failed" if "failed" in outcomes else "skipped" if set(outcomes) == {"skipped"} else "passed"
                record[name] = {"finished": finished, "commit": commit, "outcome": ended}
                if self.deselected.get(name):  # a selection of its cases: the record says how many, not "passed"
                    ran = sum(1 for outcome in outcomes if outcome != "skipped")
                    whole = last_whole(before.get(name))
                    record[name]["cases"] = f"{ran} of {ran + self.deselected[name]}"
                    if whole:  # the last run of all its cases stays beside it: a selection does not erase it
                        record[name]["whole"] = whole
            RECORD.write_text(json.dumps(dict(sorted(record.items())), indent=1) + "\n")


def last_whole(run: dict | None) -> dict | None:
    """The last run of all of a test's cases in its record `run` (the run itself, or the one a selection kept)."""
    if not run:
        return None
    if not run.get("cases"):
        return {key: run[key] for key in ("finished", "commit", "outcome")}
    return run.get("whole")


def passed(run: dict | None) -> bool:
    """A recorded pass of the claims resting on a test: its last run passed, and if that ran only some of its cases,
    the last run of all of them passed too."""
    whole = last_whole(run)
    return bool(run) and run["outcome"] == "passed" and bool(whole) and whole["outcome"] == "passed"


def load() -> dict:
    return json.loads(RECORD.read_text()) if RECORD.exists() else {}


def _commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    # The record itself and the page rendered from it are no change to the code that ran.
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                            ":!tests/slow-runs.json", ":!docs/validation.md"], cwd=REPO,
                           capture_output=True, text=True)
    return (head.stdout.strip() or "no commit") + ("+changes" if dirty.stdout.strip() else "")


def table(page_text: str, record: dict) -> str:
    """A row for each slow test the page names: when it last ran, on which commit, how it ended."""
    named = sorted(set(SLOW_REFERENCE.findall(SECTION.sub("", page_text))))  # (name, "slow" or "partly slow")
    rows = ["| slow test | last run (`pytest -m slow`) | commit | outcome |", "|---|---|---|---|"]
    for name, slow in named:
        run = record.get(name)
        outcome = run and run["outcome"] + (f" ({run['cases']} cases)" if run.get("cases") else "")
        if run and run.get("whole"):
            whole = run["whole"]
            outcome += f"; all its cases last: {whole['outcome']}, {whole['finished']}, `{whole['commit']}`"
        # The commit in code: a hash such as 56766e2 would read as a typed figure (tests/docs/test_pages.py).
        rows.append(f"| `{name}` ({slow}) | " + (f"{run['finished']} | `{run['commit']}` | {outcome} |" if run
                                                  else "not recorded | | |"))
    return "\n".join(rows) + "\n"


# Beside each slow test the page names (outside the table) whose record has no pass: the claim rests on a run that
# has not happened (issue 41).
NOT_RUN = " — not run yet"
_NAMED = re.compile(SLOW_REFERENCE.pattern + f"(?:{re.escape(NOT_RUN)})?")


def annotated(text: str, record: dict) -> str:
    """`text` with NOT_RUN after each slow test it names that has no recorded pass, and none after those that have."""
    def mark(found):
        return found[0].removesuffix(NOT_RUN) + ("" if passed(record.get(found[1])) else NOT_RUN)

    return _NAMED.sub(mark, text)


def rendered(page_text: str, record: dict) -> str:
    """The page with its table of slow runs, and each claim resting on a slow test with no recorded pass marked."""
    parts = SECTION.split(page_text, maxsplit=1)  # before, the markers and the table (4 groups), after
    if len(parts) == 1:
        return annotated(page_text, record)
    before, opening, _, closing, after = parts
    return (annotated(before, record) + opening + table(page_text, record) + closing + annotated(after, record))


def other_pages() -> list[Path]:
    """README.md and the manual's pages besides the validation page that name a slow test: each claim there resting
    on one with no recorded pass says so too."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [page for page in pages if page != VALIDATION and SLOW_REFERENCE.search(page.read_text())]


if __name__ == "__main__":
    text = VALIDATION.read_text()
    if not SECTION.search(text):
        sys.exit(f"{VALIDATION} has no <!-- slow-runs --> ... <!-- /slow-runs --> markers to fill")
    VALIDATION.write_text(rendered(text, load()))
    for page in other_pages():
        page.write_text(annotated(page.read_text(), load()))
