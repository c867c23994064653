import json
import sys
from pathlib import Path

import pytest
from tests.support import run_cli

from acceltrain.commands import report
from acceltrain.errors import UsageError

METRICS = {
    "test_accuracy": 0.91,
    "test_loss": 0.3,
    "test_metrics": {"accuracy": 0.91, "loss": 0.3},
    "history": {"accuracy": [0.5, 0.8, 0.9], "loss": [1.5, 0.7, 0.4],
                "val_accuracy": [0.6, 0.82, 0.88], "val_loss": [1.2, 0.6, 0.45]},
    "epoch_seconds": [3.0, 0.2, 0.25],
    "first_epoch_seconds": 3.0,
    "seconds_to_first_epoch_end": 5.5,
    "samples_per_second": 12000.0,
    "config": {"recipe": "mnist-mlp", "model": None, "epochs": 3, "batch_size": 240, "learning_rate": None,
               "seed": 0, "out": "runs/a"},
    "runtime": {"backend": "jax", "platform": "cpu", "device_kind": "cpu", "num_devices": 8, "num_replicas": 8,
                "num_processes": 1, "distribution": "DataParallel", "simulated_devices": True,
                "decisions": {"backend": "jax (the default)",
                              "distribution": "DataParallel (8 devices: each takes a slice of every batch)"},
                "versions": {"python": "3.11.7", "keras": "3.15.1"}},
}


def lines_by_label(ax):
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}


def test_the_figure_plots_training_and_validation_per_epoch_and_the_test_figure():
    fig = report.figure(METRICS)
    loss_ax, metric_ax, seconds_ax = fig.axes
    loss, accuracy = lines_by_label(loss_ax), lines_by_label(metric_ax)
    assert loss.pop("test loss 0.3000")[1] == [0.3, 0.3]  # a horizontal line across the panel
    assert accuracy.pop("test accuracy 0.9100")[1] == [0.91, 0.91]
    assert loss == {"training loss": ([1, 2, 3], [1.5, 0.7, 0.4]), "validation loss": ([1, 2, 3], [1.2, 0.6, 0.45])}
    assert accuracy == {"training accuracy": ([1, 2, 3], [0.5, 0.8, 0.9]),
                        "validation accuracy": ([1, 2, 3], [0.6, 0.82, 0.88])}
    assert [ax.get_xlabel() for ax in fig.axes] == ["epoch"] * 3 and seconds_ax.get_ylabel() == "s"
    assert [bar.get_height() for bar in seconds_ax.patches] == [3.0, 0.2, 0.25]
    assert ("test accuracy 0.9100 (last epoch: training 0.9000, validation 0.8800); test loss 0.3000 (last epoch: "
            "training 0.4000, validation 0.4500)") in fig._suptitle.get_text()


def test_without_validation_only_training_series_and_the_title_names_hardware_and_settings():
    metrics = {**METRICS, "history": {"loss": [1.0, 0.5], "mae": [0.9, 0.4]}, "epoch_seconds": [1.0, 0.1],
               "test_metrics": {"loss": 0.6, "mae": 0.5}}
    fig = report.figure(metrics)
    assert [list(lines_by_label(ax)) for ax in fig.axes[:2]] == [["training loss", "test loss 0.6000"],
                                                                  ["training mae", "test mae 0.5000"]]
    title = fig._suptitle.get_text()
    assert "jax on cpu: 8 × cpu (simulated), distribution DataParallel" in title
    assert "mnist-mlp, 3 epochs, batch 240" in title and "seed 0" in title


def test_the_markdown_has_hardware_decisions_settings_timings_and_results():
    text = report.markdown(METRICS)
    assert "- **distribution**: DataParallel (8 devices: each takes a slice of every batch)" in text
    assert "| accuracy | 0.9100 |" in text
    assert "| batch_size | 240 |" in text and "| learning_rate | default |" in text
    assert "- first epoch (epoch 1): 3.00 s (includes compiling)" in text
    assert "- later epochs (epochs 2-3): 0.23 s on average" in text
    assert "- training samples per second: 12,000 (timed over epochs 2, 3)" in text
    assert "| 3 | 0.9000 | 0.4000 | 0.8800 | 0.4500 | 0.25 |" in text  # the last epoch's row


LEDGER = {"wall_seconds": 20.0, "parts": {"start_up": 5.0, "compilation": 2.0, "input_wait": 0.0, "device_steps": 8.0,
                                         "host_syncs": 0.0, "evaluation": 0.5, "checkpoint": 3.0, "preemption": 0.0,
                                         "rest": 1.5},
          "started": 100.0, "ended": 120.0, "compiles": 6, "cache_requests": 6, "cache_hits": 6, "cache_misses": 0,
          "steps": 150, "checkpoints": 3, "flops_per_step": 3.2e9, "mfu": None}


def test_a_runs_ledger_is_a_panel_of_the_figure_and_a_table_of_the_markdown():
    """metrics.json's ledger (acceltrain/ledger.py): one bar a part that took time, the largest on top; the table
    sums to the wall, with the line and what was counted."""
    metrics = {**METRICS, "ledger": LEDGER}
    ledger_ax = report.figure(metrics).axes[-1]
    assert [tick.get_text() for tick in ledger_ax.get_yticklabels()][-1] == "device steps"
    assert sorted(bar.get_width() for bar in ledger_ax.patches) == [0.5, 1.5, 2.0, 3.0, 5.0, 8.0]
    assert ledger_ax.get_title() == "where the 20.0 s went"
    text = report.markdown(metrics)
    assert "## Where the time went" in text and "| checkpoint | 3.00 | 15 % |" in text
    assert "| **wall time** | 20.00 | 100 % |" in text
    assert "where the 20.0 s went: device steps 8.0 s (40 %), start-up 5.0 s (25 %)" in text
    assert "- 6 programs compiled or loaded; the persistent cache: 6 hits, 0 misses" in text
    assert "- 3.20 GFLOP a training step (its matmuls, as traced)" in text and "MFU" not in text
    assert "Where the time went" not in report.markdown(METRICS) and len(report.figure(METRICS).axes) == 3


def test_a_resumed_runs_timings_say_which_epochs_this_process_timed():
    """Issue 20, item 14: the first epoch's time came from the earlier process, and the resumed epoch counted whole."""
    metrics = {**METRICS, "timed_epochs": [{"epoch": 2, "seconds": 4.0, "steps": 3}, {"epoch": 3, "seconds": 0.5, "steps": 10}],
               "samples_per_second": 4800.0, "samples_per_second_epochs": [3], "seconds_to_first_epoch_end": 6.0}
    text = report.markdown(metrics)
    assert "- first epoch this process ran (epoch 2, 3 steps of it): 4.00 s (includes compiling)" in text
    assert "- later epochs (epoch 3): 0.50 s on average" in text
    assert "- start to the end of epoch 2: 6.00 s" in text
    assert ("- training samples per second: 4,800 (timed over epoch 3; earlier epochs ran in an earlier process)"
            in text)


def test_redraw_writes_the_three_files_from_metrics_json(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps(METRICS))
    written = report.redraw(tmp_path)
    assert written == [tmp_path / "report.png", tmp_path / "report.md", tmp_path / "report.html"]
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "report.md").read_text() == report.markdown(METRICS)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["metrics.json", "report.html", "report.md",
                                                                 "report.png"]


def test_without_matplotlib_the_markdown_and_the_page_are_still_written_and_the_fix_named(tmp_path, monkeypatch,
                                                                                          capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert report.write(tmp_path, METRICS) == [tmp_path / "report.md", tmp_path / "report.html"]
    assert "pip install matplotlib" in (tmp_path / "report.html").read_text()
    assert "pip install matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "report.png").exists()


@pytest.mark.parametrize("content, message", [(None, "has no metrics.json"), ("{", "cannot be read as JSON"),
                                              ('{"a": 1}', "has no per-epoch history"),
                                              ('{"history": {"loss": "abc"}}', r"has a per-epoch history acceltrain "
                                               r"did not write: 'loss' is 'abc', not a list of numbers\. Pass"),
                                              ('{"history": {"loss": [1, 0.5], "accuracy": [0.5]}}',
                                               r"different numbers of epochs \(loss 2, accuracy 1\)")])
def test_redraw_of_a_folder_that_is_not_a_run_is_a_usage_error(tmp_path, content, message):
    if content is not None:
        (tmp_path / "metrics.json").write_text(content)
    with pytest.raises(UsageError, match=message):  # the last two: matplotlib's ValueError, a traceback
        report.redraw(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ([] if content is None else ["metrics.json"])


def test_cli_report_redraws_and_exits_2_on_a_folder_without_a_run(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.json").write_text(json.dumps(METRICS))
    done = run_cli("report", tmp_path / "run", timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(tmp_path / "run" / name) for name in ("report.png", "report.md", "report.html")]
    helped = run_cli("report", "-h", timeout=120)  # the help names every file the verb writes
    assert [name for name in ("report.png", "report.md", "report.html") if name in helped.stdout] == [
        Path(path).name for path in done.stdout.split()]
    empty = run_cli("report", tmp_path, timeout=120)
    assert empty.returncode == 2 and "has no metrics.json" in empty.stderr
