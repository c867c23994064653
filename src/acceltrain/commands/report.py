"""The run report: report.png (curves per epoch, the test's figures, where the time went), report.md (hardware,
decisions, settings, timings) and report.html (the same in a browser, the picture inside it, and the config to
rerun the job).

All are made from metrics.json (and the run's config.toml) alone, so `acceltrain report DIR` redraws them for any
finished run.
Plots use matplotlib's Figure with the Agg canvas directly, never pyplot: no display needed, and no
global figure state left behind in the caller's process.
"""

import importlib.util
import json
import math
from pathlib import Path

from acceltrain import ledger, log
from acceltrain.commands import outputs
from acceltrain.errors import UsageError

PNG = "report.png"
MD = "report.md"
HTML = "report.html"
CONFIG = "config.toml"  # written beside the report by `acceltrain train` (commands/config.py)


def write(out_dir: str | Path, metrics: dict) -> list[Path]:
    """Write report.png, report.md and report.html into `out_dir`, each atomically. Returns their paths."""
    out_dir = Path(out_dir)
    png, md, page = out_dir / PNG, out_dir / MD, out_dir / HTML
    written = []
    if importlib.util.find_spec("matplotlib") is None:
        # The run itself has succeeded: a missing plotting library costs the picture, not the run.
        log.warn(f"matplotlib is not installed, so there is no {PNG}: pip install matplotlib, then "
                 f"`acceltrain report {out_dir}` draws it.")
    else:
        with outputs.atomic_path(png) as temporary:
            figure(metrics).savefig(temporary, format="png", dpi=110)
        written.append(png)
    with outputs.atomic_path(md) as temporary:
        temporary.write_text(markdown(metrics))
    config_path = out_dir / CONFIG
    config_text = config_path.read_text() if config_path.is_file() else None
    with outputs.atomic_path(page) as temporary:
        temporary.write_text(html(metrics, png.read_bytes() if png in written else None, config_text))
    return [*written, md, page]


def redraw(out_dir: str | Path) -> list[Path]:
    """`acceltrain report DIR`: the report of a finished run, from its metrics.json."""
    path = Path(out_dir) / "metrics.json"
    try:
        metrics = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"Received {str(out_dir)!r}, which has no metrics.json. Pass the --out folder of a "
                         "finished `acceltrain train` run.") from None
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"{str(path)!r} cannot be read as JSON ({error}). Pass the --out folder of a "
                         "finished `acceltrain train` run.") from None
    if not isinstance(metrics, dict) or not isinstance(metrics.get("history"), dict):
        raise UsageError(f"{str(path)!r} has no per-epoch history. Pass the --out folder of a finished "
                         "`acceltrain train` run.")
    problem = _history_problem(metrics["history"])
    if problem:
        raise UsageError(f"{str(path)!r} has a per-epoch history acceltrain did not write: {problem}. Pass the --out "
                         "folder of a finished `acceltrain train` run.")
    return write(out_dir, metrics)


def _history_problem(history: dict) -> str:
    """What makes `history` other than Keras's History.history as train writes it (one list of numbers a metric, an
    entry an epoch), in words; else empty. The figure met it with a matplotlib traceback ('x and y must have same
    first dimension')."""
    lengths = {}
    for name, values in history.items():
        if not isinstance(values, list) or not all(isinstance(value, (int, float)) and not isinstance(value, bool)
                                                   for value in values):
            return f"{name!r} is {str(values)[:40]!r}, not a list of numbers"
        lengths[name] = len(values)
    if len(set(lengths.values())) > 1:
        return "its metrics have different numbers of epochs (" + ", ".join(f"{name} {count}" for name, count in
                                                                           lengths.items()) + ")"
    return ""


# --- The figure -------------------------------------------------------------------------------

def figure(metrics: dict):
    """A matplotlib Figure: loss, then the other metrics, then seconds per epoch, then (where metrics.json has a
    ledger) where the run's time went, one panel each.

    Each series is a line labelled "training NAME" or "validation NAME" (Keras's val_NAME), x the
    epoch number from 1; the test set's figure, after training, a horizontal line labelled "test NAME 0.9842".
    The ledger's panel has a bar per part that took time, in seconds.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    history = metrics.get("history", {})
    test = {name: value for name, value in (metrics.get("test_metrics") or {}).items()
            if isinstance(value, (int, float)) and math.isfinite(value)}
    names = [name for name in _metric_names(history) if name != "loss"]
    panels = ["loss"] * ("loss" in history) + (["metrics"] if names else []) + ["seconds"] + \
        ["ledger"] * bool(metrics.get("ledger"))
    fig = Figure(figsize=(4.2 * len(panels), 3.8), layout="constrained")
    fig.suptitle(title(metrics), fontsize=9)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        if panel == "loss":
            _plot_series(ax, history, ["loss"], test)
            ax.set_title("loss")
        elif panel == "metrics":
            _plot_series(ax, history, names, test)
            ax.set_title(", ".join(names))
        elif panel == "ledger":
            _plot_ledger(ax, ledger.Ledger.from_json(metrics["ledger"]))
            continue
        else:
            seconds = metrics.get("epoch_seconds") or []
            epochs = list(range(1, len(seconds) + 1))
            ax.bar(epochs, seconds, color="tab:gray", label="seconds per epoch")
            ax.set_title("seconds per epoch (1st: + compile)")
            ax.set_ylabel("s")
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if panel != "seconds":
            ax.legend(fontsize=8)
    return fig


def _plot_ledger(ax, run: ledger.Ledger) -> None:
    """Horizontal bars: the seconds of each part that took any, the largest on top."""
    parts = [(part, seconds) for part, seconds in sorted(run.parts.items(), key=lambda item: item[1]) if seconds > 0]
    ax.barh([ledger.words(part) for part, _ in parts], [seconds for _, seconds in parts], color="tab:blue")
    ax.set_title(f"where the {run.wall_seconds:.1f} s went")
    ax.set_xlabel("s")
    ax.grid(alpha=0.3, axis="x")


def _metric_names(history: dict) -> list[str]:
    """Metric names in Keras's order, without the val_ prefix, keeping only per-epoch numbers."""
    names = []
    for key, values in history.items():
        name = key.removeprefix("val_")
        if name not in names and isinstance(values, list) and name != "learning_rate":
            names.append(name)
    return names


def _plot_series(ax, history: dict, names: list[str], test: dict) -> None:
    for name in names:
        for prefix, split, style in (("", "training", "-"), ("val_", "validation", "--")):
            values = history.get(prefix + name)
            if values:
                ax.plot(range(1, len(values) + 1), values, style, marker="o", markersize=3,
                        label=f"{split} {name}")
        if name in test:
            ax.axhline(test[name], color="tab:red", linestyle=":", linewidth=1.5, label=f"test {name} {test[name]:.4f}")


def title(metrics: dict) -> str:
    """One line with the hardware and the settings, e.g. 'jax on cpu: 8 × cpu (simulated), DataParallel ...'."""
    runtime = metrics.get("runtime", {})
    config = metrics.get("config", {})
    devices = f"{runtime.get('num_devices', '?')} × {runtime.get('device_kind', '?')}"
    if runtime.get("simulated_devices"):
        devices += " (simulated)"
    rate = config.get("learning_rate")
    settings = [
        config.get("model") or config.get("recipe") or "?",
        f"{config.get('epochs', '?')} epochs",
        f"batch {config.get('batch_size', '?')}",
        metrics.get("optimizer") or (f"lr {rate:g}" if isinstance(rate, (int, float)) else "lr: as compiled"),
        f"seed {config.get('seed', '?')}",
    ]
    hardware = f"{runtime.get('backend', '?')} on {runtime.get('platform', '?')}: {devices}, " \
               f"distribution {runtime.get('distribution', '?')}"
    line = f"{hardware} | {', '.join(settings)}"
    tested = _tested(metrics)
    return f"{line}\n{tested}" if tested else line


def _tested(metrics: dict) -> str:
    """The test's figures beside the last epoch's, e.g. 'test accuracy 0.9842 (last epoch: training 0.9999,
    validation 0.9801)': how far training's figure is from the test's is what overfitting looks like."""
    history = metrics.get("history") or {}
    said = []
    for name, value in (metrics.get("test_metrics") or {}).items():
        if not isinstance(value, (int, float)):
            continue
        last = [f"{split} {history[key][-1]:.4f}" for split, key in (("training", name), ("validation", f"val_{name}"))
                if isinstance(history.get(key), list) and history[key]]
        said.append(f"test {name} {value:.4f}" + (f" (last epoch: {', '.join(last)})" if last else ""))
    return "; ".join(said)


# --- The markdown -----------------------------------------------------------------------------

def markdown(metrics: dict) -> str:
    runtime = metrics.get("runtime", {})
    config = metrics.get("config", {})
    history = metrics.get("history", {})
    seconds = metrics.get("epoch_seconds") or []
    lines = ["# Run report", "", title(metrics).replace("\n", "\n\n"), "", f"![loss and metrics per epoch]({PNG})", ""]

    lines += ["## Result", "", "| metric | test |", "|---|---|"]
    lines += [f"| {name} | {_number(value)} |" for name, value in (metrics.get("test_metrics") or {}).items()]

    lines += ["", "## Hardware", "", "| | |", "|---|---|"]
    for key in ("backend", "platform", "device_kind", "num_devices", "num_replicas", "num_processes",
                "distribution", "simulated_devices"):
        if key in runtime:
            lines.append(f"| {key} | {runtime[key]} |")
    versions = runtime.get("versions") or {}
    if versions:
        lines.append(f"| versions | {', '.join(f'{name} {version}' for name, version in versions.items())} |")

    lines += ["", "## Decisions and why", ""]
    lines += [f"- **{topic}**: {decision}" for topic, decision in _decisions(metrics).items()] or ["- none recorded"]

    lines += ["", "## Settings", "", "| setting | value |", "|---|---|"]
    lines += [f"| {key} | {'default' if value is None else value} |" for key, value in config.items()]

    lines += ["", "## Timings", ""]
    lines += _timings(metrics, seconds)
    if metrics.get("ledger"):
        lines += ["", "## Where the time went", ""] + _ledger(ledger.Ledger.from_json(metrics["ledger"]))

    keys = [key for key, values in history.items() if isinstance(values, list)]
    if keys:
        lines += ["", "## Per epoch", "", "| epoch | " + " | ".join(keys) + " | seconds |",
                  "|---" * (len(keys) + 2) + "|"]
        for epoch in range(max(len(history[key]) for key in keys)):
            row = [_number(history[key][epoch]) if epoch < len(history[key]) else "" for key in keys]
            row.append(f"{seconds[epoch]:.2f}" if epoch < len(seconds) else "")
            lines.append(f"| {epoch + 1} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def _decisions(metrics: dict) -> dict:
    """What the banner said: the job (its defaults and validation), then the runtime's decisions with their reasons."""
    job = {"job": metrics["job"]} if metrics.get("job") else {}
    return {**job, **(metrics.get("runtime", {}).get("decisions") or {})}


# --- The page ---------------------------------------------------------------------------------

_STYLE = """body{font-family:system-ui,sans-serif;max-width:72rem;margin:1.5rem auto;padding:0 1rem;color:#222}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:1.6rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.9rem}td,th{border:1px solid #ddd;padding:.2rem .5rem;text-align:left}
img{max-width:100%}pre{background:#f6f6f6;padding:.6rem;overflow-x:auto}.result{font-size:1.2rem}"""


def html(metrics: dict, png: bytes | None = None, config_text: str | None = None) -> str:
    """report.html: one file that opens in any browser with nothing beside it (the picture inside it): the test's
    figures, the curves, the banner's decisions, where the time went, the settings and the config to rerun."""
    import base64
    from html import escape

    def table(header, rows):
        head = "".join(f"<th>{escape(str(cell))}</th>" for cell in header)
        body = "".join("<tr>" + "".join(f"<td>{escape(str(cell))}</td>" for cell in row) + "</tr>" for row in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    config = metrics.get("config", {})
    history = metrics.get("history", {})
    seconds = metrics.get("epoch_seconds") or []
    heading, _, tested = title(metrics).partition("\n")
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Run report: "
             f"{escape(str(config.get('model') or config.get('recipe') or 'acceltrain'))}</title>"
             f"<style>{_STYLE}</style></head><body>",
             "<h1>Run report</h1>", f"<p id='run'>{escape(heading)}</p>",
             f"<p id='result' class='result'>{escape(tested or 'no test figures')}</p>"]
    if png is not None:
        # onload: the width the browser decoded, kept on the element (the page's test reads it from the DOM).
        parts.append(f"<img id='plots' onload='this.dataset.decodedWidth = this.naturalWidth' alt='loss and metrics per epoch, training and validation, the test figures, "
                     f"seconds per epoch and where the time went' src='data:image/png;base64,"
                     f"{base64.b64encode(png).decode()}'>")
    else:
        parts.append(f"<p id='plots'>No plots: matplotlib is not installed (pip install matplotlib, then "
                     f"<code>acceltrain report {escape(str(config.get('out', 'DIR')))}</code>).</p>")
    parts += ["<h2 id='decisions'>Decisions and why</h2><ul>"] + \
        [f"<li><b>{escape(topic)}</b>: {escape(str(decision))}</li>" for topic, decision in _decisions(metrics).items()] + \
        ["</ul>"]
    if metrics.get("ledger"):
        run = ledger.Ledger.from_json(metrics["ledger"])
        wall = run.wall_seconds or 1.0
        parts += ["<h2 id='ledger'>Where the time went</h2>", f"<p>{escape(run.line())}</p>",
                  table(["part", "seconds", "share"],
                        [(ledger.words(part), f"{value:.2f}", ledger.percent(value / wall)) for part, value in
                         run.parts.items()] + [("wall time", f"{run.wall_seconds:.2f}", "100 %")])]
    parts += ["<h2 id='timings'>Timings</h2><ul>"] + \
        [f"<li>{escape(line.removeprefix('- '))}</li>" for line in _timings(metrics, seconds)] + ["</ul>"]
    keys = [key for key, values in history.items() if isinstance(values, list)]
    if keys:
        rows = [[epoch + 1] + [_number(history[key][epoch]) if epoch < len(history[key]) else "" for key in keys]
                + [f"{seconds[epoch]:.2f}" if epoch < len(seconds) else ""]
                for epoch in range(max(len(history[key]) for key in keys))]
        parts += ["<h2 id='epochs'>Per epoch</h2>", table(["epoch", *keys, "seconds"], rows)]
    runtime = metrics.get("runtime", {})
    parts += ["<h2 id='hardware'>Hardware</h2>",
              table(["", ""], [(key, runtime[key]) for key in ("backend", "platform", "device_kind", "num_devices",
                                                                "num_replicas", "num_processes", "distribution")
                               if key in runtime])]
    parts += ["<h2 id='config'>The config, to run the job again</h2>",
              f"<pre>acceltrain train --config {escape(str(Path(config.get('out') or '.') / CONFIG))} "
              "--out NEW_FOLDER</pre>"]
    if config_text is not None:
        parts.append(f"<pre id='config-toml'>{escape(config_text)}</pre>")
    else:
        parts.append(table(["setting", "value"], [(key, "default" if value is None else value)
                                                  for key, value in config.items()]))
    return "\n".join(parts) + "\n</body></html>\n"


def _timings(metrics: dict, seconds: list) -> list[str]:
    """What was timed, and from which epochs: a resumed run times only the epochs its last process ran (the
    first of them compiles; the one it resumed, only the steps it ran), never an earlier process's."""
    timed = metrics.get("timed_epochs") or [{"epoch": number, "seconds": value, "steps": None}
                                            for number, value in enumerate(seconds, 1)]
    if not timed:
        return []
    first, steady = timed[0], timed[1:]
    resumed = timed[0]["epoch"] > 1
    lines = [f"- first epoch{' this process ran' if resumed else ''} (epoch {first['epoch']}"
             f"{', ' + str(first['steps']) + ' steps of it' if resumed and first['steps'] else ''}): "
             f"{first['seconds']:.2f} s (includes compiling)"]
    if steady:
        lines.append(f"- later epochs ({_epochs(steady)}): {sum(e['seconds'] for e in steady) / len(steady):.2f} s on average")
    if isinstance(metrics.get("seconds_to_first_epoch_end"), (int, float)):
        lines.append(f"- start to the end of epoch {first['epoch']}: {metrics['seconds_to_first_epoch_end']:,.2f} s")
    if isinstance(metrics.get("samples_per_second"), (int, float)):
        basis = metrics.get("samples_per_second_epochs") or [e["epoch"] for e in steady or timed]
        compile_note = ", including its compile" if metrics.get("samples_per_second_includes_compile") else ""
        lines.append(f"- training samples per second: {metrics['samples_per_second']:,.0f} (timed over epoch"
                     f"{'s' * (len(basis) > 1)} {', '.join(map(str, basis))}{compile_note}"
                     f"{'; earlier epochs ran in an earlier process' if resumed else ''})")
    return lines


def _ledger(run: ledger.Ledger) -> list[str]:
    """The ledger as a table of its parts (acceltrain/ledger.py says what each is), its line, and what it counted."""
    wall = run.wall_seconds or 1.0
    lines = [run.line(), "", "| part | seconds | share |", "|---|---|---|"]
    lines += [f"| {ledger.words(part)} | {seconds:.2f} | {ledger.percent(seconds / wall)} |"
              for part, seconds in run.parts.items()]
    lines.append(f"| **wall time** | {run.wall_seconds:.2f} | 100 % |")
    facts = run.facts
    counted = []
    if facts.get("compiles"):
        cache = (f"; the persistent cache: {facts.get('cache_hits', 0)} hits, "
                 f"{facts['cache_requests'] - facts.get('cache_hits', 0)} misses" if "cache_requests" in facts else "")
        counted.append(f"{facts['compiles']} programs compiled or loaded{cache}")
    if facts.get("steps"):
        counted.append(f"{facts['steps']} training steps")
    if facts.get("flops_per_step"):
        counted.append(f"{facts['flops_per_step'] / 1e9:.2f} GFLOP a training step (its matmuls, as traced)")
    if run.mfu is not None:
        counted.append(f"MFU {ledger.percent(run.mfu)} of the published peak")
    if facts.get("checkpoints"):
        counted.append(f"{facts['checkpoints']} checkpoints")
    if facts.get("steps_redone"):
        counted.append(f"{facts['steps_redone']} steps run again after the resume")
    return lines + ([""] + [f"- {fact}" for fact in counted] if counted else [])


def _epochs(timed: list[dict]) -> str:
    numbers = [e["epoch"] for e in timed]
    return f"epoch {numbers[0]}" if len(numbers) == 1 else f"epochs {numbers[0]}-{numbers[-1]}"


def _number(value) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if math.isfinite(value) else str(value)
    return str(value)
