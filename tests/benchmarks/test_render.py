"""BENCHMARKS.md is exactly what the committed records render to: a hand edit, a record changed without
rendering again, or a script whose rendering changed fails here (the fix: `python benchmarks/render.py`, or
rerun the benchmark). Every record says where it came from, and a quick record is never rendered there."""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import _results, render
from benchmarks.sections import BY_NAME, SECTIONS
from tests.support import REPO

FIX = "run `python benchmarks/render.py` (or rerun the benchmark) and commit what it writes"


def test_benchmarks_md_is_what_the_committed_records_render():
    assert render.BENCHMARKS_MD.read_text() == render.rendered()[render.BENCHMARKS_MD], \
        f"BENCHMARKS.md differs from what benchmarks/results/ renders: {FIX}"


def test_every_record_belongs_to_a_section_whose_script_renders_it():
    committed = sorted(path.stem for path in _results.RESULTS.glob("*.json"))
    assert committed and set(committed) <= set(BY_NAME), \
        f"records with no entry in benchmarks/sections.py: {set(committed) - set(BY_NAME)}"
    for section in SECTIONS:
        module = render.script_module(section.script)
        assert callable(module.summarize) and callable(module.render), section.script
        assert (_results.HERE / section.script).exists()


def test_each_record_says_when_where_and_how_it_was_made():
    for path in _results.RESULTS.glob("*.json"):
        record = json.loads(path.read_text())
        assert record["section"] == path.stem and record["script"] == BY_NAME[path.stem].script
        assert record["quick"] is False, f"{path}: a --quick record must never be committed"
        assert record["command"].startswith(f"python benchmarks/{record['script']}")
        assert {"cpu", "cores"} <= set(record["machine"]) and "python" in record["versions"]
        if record["provenance"] == _results.MEASURED:
            assert record["started"] and record["finished"] and "raw" in record and "summary" not in record
            commit = record["versions"].get("commit", "")
            assert commit and not commit.endswith(_results.UNCOMMITTED), \
                f"{path} was measured on {commit or 'no commit'}: rerun it on a committed tree"
        else:  # until the rerun: figures copied from an older BENCHMARKS.md, and the record says so
            assert record["provenance"].startswith("Transcribed from BENCHMARKS.md as committed on ")
            assert record["provenance"].endswith("rerun pending") and "summary" in record and "raw" not in record


def test_a_quick_record_is_refused_for_the_committed_files(tmp_path):
    record = json.loads((_results.RESULTS / "matmul-dtypes.json").read_text())
    (tmp_path / "matmul-dtypes.json").write_text(json.dumps({**record, "quick": True}))
    with pytest.raises(render.RefusedRecord, match="matmul-dtypes.json is a --quick run's record"):
        render.records(tmp_path)
    assert render.records(tmp_path, allow_quick=True)["matmul-dtypes"]["quick"]  # run_all --quick, in a temp folder


@pytest.mark.parametrize("commit, says", [
    ("abc1234+changes", r"measured on a tree with uncommitted changes \(abc1234\+changes\)"),
    (None, "measured with no commit recorded"),
])
def test_a_record_of_no_commit_is_refused_naming_it_and_the_fix(tmp_path, commit, says):
    record = json.loads((_results.RESULTS / "matmul-dtypes.json").read_text())
    versions = {k: v for k, v in record["versions"].items() if k != "commit"} | ({"commit": commit} if commit else {})
    (tmp_path / "matmul-dtypes.json").write_text(json.dumps({**record, "versions": versions}))
    with pytest.raises(render.RefusedRecord, match=says + r".*Commit your changes, then rerun `python "
                                                          r"benchmarks/matmul_dtypes.py` on the clean tree"):
        render.records(tmp_path)


def test_a_full_run_on_a_tree_with_uncommitted_changes_stops_before_measuring(tmp_path, monkeypatch):
    import argparse

    monkeypatch.setattr(_results, "versions", lambda: {"python": "3.11", "commit": "abc1234+changes"})
    with pytest.raises(SystemExit, match=r"full run on a tree with uncommitted changes \(abc1234\+changes\)\. A "
                                         r"record must name the commit it measured"):
        _results.Run("matmul_dtypes.py", argparse.Namespace(quick=False, results=tmp_path))
    assert _results.Run("matmul_dtypes.py", argparse.Namespace(quick=True, results=tmp_path)).quick  # any tree


def test_check_names_a_file_that_was_edited_by_hand(tmp_path, monkeypatch, capsys):
    edited = tmp_path / "BENCHMARKS.md"
    edited.write_text(render.BENCHMARKS_MD.read_text().replace("| 98.4 | 98.4 | 98.5 |", "| 98.4 | 98.4 | 98.9 |"))
    monkeypatch.setattr(render, "BENCHMARKS_MD", edited)
    monkeypatch.setattr(render, "documents", lambda: [])
    assert render.main(["--check"]) == 1
    assert "differs from what benchmarks/results/ gives" in capsys.readouterr().err
    assert render.main([]) == 0 and "98.9" not in edited.read_text() and render.main(["--check"]) == 0


def test_a_marker_for_a_quote_no_section_offers_is_an_error_naming_the_ones_it_does():
    said = render.quotes(render.records())
    with pytest.raises(KeyError, match="epoch-speed/nope. The section offers: acceltrain-vs-hand, cache-cut"):
        render.fill_markers("x <!-- measured:epoch-speed/nope -->old<!-- /measured --> y", said)
    with pytest.raises(KeyError, match="section 'no-such'. Valid sections: learning-rate"):
        render.fill_markers("<!-- measured:no-such/x --><!-- /measured -->", said)
    filled = render.fill_markers("a <!-- measured:epoch-speed/of-ceiling -->old<!-- /measured --> b", said)
    assert filled == f"a <!-- measured:epoch-speed/of-ceiling -->{render.quote('epoch-speed', 'of-ceiling')}<!-- /measured --> b"


def test_a_record_says_it_is_transcribed_undated_or_from_another_cpu():
    # A record as the transcription of an older BENCHMARKS.md wrote it (every committed one has been rerun since).
    transcribed = {"section": "fit-options", "script": "fit_options.py", "provenance":
                   "Transcribed from BENCHMARKS.md as committed on 2026-12-02 (8943dbd), rerun pending", "quick": False,
                   "started": None, "finished": None, "wall_seconds": None,
                   "machine": {"cpu": "AMD EPYC", "cores": 2, "load_before": None, "load_after": None},
                   "versions": {"python": "3.11.7"}}
    said = _results.provenance(transcribed, {"cpu": "Intel(R) Xeon(R) Processor", "cores": 2})
    assert said.startswith("Transcribed from BENCHMARKS.md as committed on 2026-12-02") and "undated" in said
    assert "another CPU than most sections here (2 cores of Intel(R) Xeon(R) Processor)" in said
    measured = {"provenance": "measured", "started": "2026-12-04T08:00:00Z", "finished": "2026-12-04T09:30:00Z",
                "wall_seconds": 5400.0, "machine": {"cpu": "X", "cores": 2, "load_before": 0.3, "load_after": 2.6},
                "versions": {"python": "3.11.7", "keras": "3.15.1"}}
    said = _results.provenance(measured, {"cpu": "X", "cores": 2})
    assert said.startswith("Measured 2026-12-04 08:00 to 09:30 UTC (1.5 h) on 2 cores of X, load average (1 min) "
                           "0.3 at the start, 2.6 at the end, above the machine's 2 cores")
    assert "another CPU" not in said and "Python 3.11.7, keras 3.15.1" in said


def test_a_section_not_measured_yet_says_what_measures_it():
    said = render.section_text("epoch-speed-gpu", None, None)
    assert "Not measured yet: `python benchmarks/epoch_speed.py --section epoch-speed-gpu" in said
    assert "benchmarks/gpu_check.sh" in said


def test_a_record_keeps_the_command_without_where_it_was_written():
    assert _results.without_results(["--quick", "--results", "/tmp/x", "--epochs", "2"]) == ["--quick", "--epochs", "2"]
    assert _results.without_results(["--results=/tmp/x", "--runs", "3"]) == ["--runs", "3"]


def test_rendering_imports_no_framework():
    """render.py imports every benchmark script: their measuring imports stay inside main()."""
    code = ("import sys; from benchmarks import render; render.rendered(); "
            "print(sorted({'jax', 'keras', 'tensorflow'} & set(sys.modules)))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr[-2000:]


# --- No figure from a loaded machine --------------------------------------------------------------

@pytest.mark.parametrize("machine, says", [
    ({"cores": 2, "load_before": 0.9, "load_after": 2.4}, None),  # its own load at the end is not another's
    ({"cores": 2, "load_before": 1.0, "others_load": 1.0}, None),
    ({"cores": 2, "load_before": 1.2}, "measured at a load average (1 min) of 1.2 at its start"),
    ({"cores": 2, "load_before": 0.2, "others_load": 1.6}, "other work kept about 1.6 cores busy besides the run's own"),
    ({"cores": 16, "load_before": 3.7}, None),  # the GPU machine: half of 16 cores
    ({"cores": 2, "load_before": None}, "its load average was not recorded"),
])
def test_a_record_is_loaded_when_others_held_more_than_half_the_cores(machine, says):
    found = _results.loaded({"provenance": _results.MEASURED, "machine": machine})
    assert found == says if says is None else says in found


def test_a_loaded_records_timed_quotes_are_withheld_naming_why_and_the_rerun():
    committed = render.records()
    quiet = {**committed["epoch-speed"], "machine": {**committed["epoch-speed"]["machine"], "load_before": 0.4}}
    loaded = {**quiet, "machine": {**quiet["machine"], "load_before": 7.5}}
    shown, withheld = render.quotes({"epoch-speed": quiet}), render.quotes({"epoch-speed": loaded})
    assert shown["epoch-speed", "summary"].startswith("On 2 cores of")
    assert withheld["epoch-speed", "summary"] == (
        "(figure withheld: BENCHMARKS.md, epoch-speed, was measured at a load average (1 min) of 7.5 at its start, "
        f"above the quiet bound of 1 on 2 cores; it waits for a quiet rerun, `{loaded['command']}`)")
    # a quote whose figures no load changes (accuracies) is quoted from a loaded record too
    learning = committed["learning-rate"]
    assert _results.loaded(learning) and not render.quotes({"learning-rate": learning})[
        "learning-rate", "seeds"].startswith("(figure withheld")


def test_every_quote_in_readme_and_the_manual_comes_from_a_quiet_record_or_is_withheld():
    found = render.records()
    said = render.quotes(found)
    for path in render.documents():
        for match in render.MARKER.finditer(path.read_text()):
            section, name = match["section"], match["name"]
            record = found[section]
            if record is None or not _results.loaded(record):
                continue
            load_free = getattr(render.script_module(BY_NAME[section].script), "LOAD_FREE", ())
            assert name in load_free or match["content"] == _results.withheld(record) == said[section, name], \
                f"{path.name} quotes {section}/{name} from a loaded record ({_results.loaded(record)}): {FIX}"


def test_a_record_keeps_the_load_while_it_ran_and_others_cpu_time_less_its_own(tmp_path, monkeypatch):
    """others_load: the machine's busy CPU seconds less the run's own, a second of wall. Here 18 s busy over a
    10 s run of which 8 s were the run's own: others kept 1.0 core busy."""
    import argparse
    import itertools

    from acceltrain.commands import machine_load

    monkeypatch.setattr(_results, "LOAD_SAMPLE_SECONDS", 0.01)
    busy, own, clock = iter([100.0, 118.0]), iter([5.0, 13.0]), itertools.chain([1000.0], itertools.repeat(1010.0))
    monkeypatch.setattr(machine_load, "cpu_busy_seconds", lambda: next(busy))
    monkeypatch.setattr(machine_load, "own_cpu_seconds", lambda: next(own))
    monkeypatch.setattr(machine_load.time, "time", lambda: next(clock))
    monkeypatch.setattr(machine_load, "load_average", lambda: 0.5)  # the 1-minute load: quiet at the start
    run = _results.Run("matmul_dtypes.py", argparse.Namespace(quick=True, results=tmp_path))
    import threading
    threading.Event().wait(0.1)  # a few load samples
    machine = json.loads(run.save("matmul-dtypes", {}).read_text())["machine"]
    assert machine["own_cpu_seconds"] == 8.0 and machine["others_load"] == 1.0 and machine["load_samples"]
    assert _results.loaded({"provenance": _results.MEASURED, "machine": machine}) is None  # 1.0: at the bound


def test_the_machines_busy_cpu_time_is_read_where_linux_keeps_it():
    first = _results.cpu_busy_seconds()
    sum(i * i for i in range(3_000_000))
    assert first is not None and _results.cpu_busy_seconds() > first
