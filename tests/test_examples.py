"""The examples run as they are: here on the CPU, unchanged from a Colab TPU."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import acceltrain

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.tensorflow
@pytest.mark.skipif(__import__("importlib").util.find_spec("tensorflow") is None, reason="needs TensorFlow")
def test_colab_tpu_trains_one_epoch_and_saves_its_weights(tmp_path):
    src = str(Path(acceltrain.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    env.pop("XLA_FLAGS", None)  # the test process's 8 simulated devices are not the example's
    result = subprocess.run([sys.executable, str(EXAMPLES / "colab_tpu.py"), "1"], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    accuracy = float(result.stdout.strip().rsplit(" ", 1)[1])
    assert accuracy > 0.85  # one epoch of the seed's MLP reaches about 0.93
    assert (tmp_path / "mnist_mlp.weights.h5").stat().st_size > 1_000_000
    assert "tensorflow on cpu" in result.stdout


@pytest.mark.slow
@pytest.mark.multi_device
def test_the_gemma_lora_fine_tune_is_sharded_by_auto_verified_and_learns_what_it_learns_plainly(tmp_path):
    """examples/gemma_lora: a Gemma built from a config, taught to count and saved as a local preset; the ordinary
    LoRA fine-tune of it, plainly and under `acceltrain run` on 8 simulated devices with 14 MiB each (its weights,
    6.4 MiB, and the activations of its step do not fit data parallel: 17.4 MiB compiled here). Under run 'auto'
    lays it out fsdp, --verify 3 passes, and its token accuracy is the plain run's within 0.01 (the same batches in
    the same order: only float sums in another order differ; measured equal to 4 digits); the adapters saved with
    save_lora_weights load back into the preset with the same predictions. Slow: about three minutes here."""
    from tests import support

    preset = tmp_path / "preset"
    made = support.python(EXAMPLES / "gemma_lora" / "make_preset.py", preset, timeout=900, KERAS_BACKEND="jax")
    assert made.returncode == 0, made.stderr
    plain = support.python(EXAMPLES / "gemma_lora" / "finetune.py", preset, timeout=900, KERAS_BACKEND="jax")
    assert plain.returncode == 0, plain.stderr
    run = support.run_cli("run", "--simulate-devices", "8", "--device-memory", "14MiB", "--verify", "3",
                          EXAMPLES / "gemma_lora" / "finetune.py", preset, timeout=900)
    assert run.returncode == 0, run.stderr

    def accuracy(stdout):
        return float(stdout.split("token accuracy: ")[1].split(" before, ")[1].split()[0])

    assert "of 14.0 MiB (--device-memory) → fsdp;" in run.stderr
    assert "→ training starts from the weights as they were" in run.stderr
    assert abs(accuracy(run.stdout) - accuracy(plain.stdout)) <= 0.01 and accuracy(plain.stdout) > 0.5
    assert "reloaded predictions the same: True" in run.stdout


# --- The notebook, through a real Jupyter kernel ---------------------------------------------------------------------

NOTEBOOK = EXAMPLES / "mnist_notebook.ipynb"


class _Notebook:
    """examples/mnist_notebook.ipynb in a real Jupyter kernel (nbclient + ipykernel), its cells run one at a time in the
    order a user runs them; each run's outputs kept as the user sees them (the text of the cell's output area)."""

    def __init__(self, folder, **parameters):
        import nbformat
        from nbclient import NotebookClient

        self.nb = nbformat.read(NOTEBOOK, as_version=4)
        [settings] = [cell for cell in self.nb.cells if "parameters" in cell.metadata.get("tags", [])]
        settings.source += "".join(f"\n{name} = {value!r}" for name, value in parameters.items())
        self.cells = {self._name(cell): cell for cell in self.nb.cells if cell.cell_type == "code"}
        self.client = NotebookClient(self.nb, timeout=300, kernel_name="python3", allow_errors=True,
                                     resources={"metadata": {"path": str(folder)}})
        env = {name: value for name, value in os.environ.items() if name not in ("XLA_FLAGS", "KERAS_BACKEND")}
        self.env = {**env, "HOME": str(folder), "TF_CPP_MIN_LOG_LEVEL": "2",  # as a fresh Colab: nobody's keras.json
                    # but this machine's font cache: a fresh one takes matplotlib (imported by TensorFlow) 20 s
                    "MPLCONFIGDIR": os.environ.get("MPLCONFIGDIR") or os.path.expanduser("~/.config/matplotlib")}

    @staticmethod
    def _name(cell) -> str:
        """A code cell by what its first comment says it does ("1. Install" → "install"), or "parameters"."""
        if "parameters" in cell.metadata.get("tags", []):
            return "parameters"
        return re.match(r"# \d+\. (\w+)", cell.source)[1].lower()

    async def run(self, name, source=None, *, interrupt_when=None):
        """Run the cell `name` (or a new cell of `source`), as the user does; `interrupt_when(text)`: press the stop
        button (the kernel's interrupt) once its output says so. Returns what its output area shows."""
        import asyncio

        from nbformat.v4 import new_code_cell

        cell = new_code_cell(source) if source is not None else self.cells[name]
        cell.outputs = []
        running = asyncio.ensure_future(self.client.async_execute_cell(cell, self.nb.cells.index(cell)
                                                                       if cell in self.nb.cells else 0))
        interrupted = False
        while not running.done():
            await asyncio.sleep(0.1)
            if interrupt_when is not None and not interrupted and interrupt_when(self.shown(cell)):
                await self.client.km.interrupt_kernel()
                interrupted = True
        await running
        assert interrupt_when is None or interrupted, f"the cell ended before the stop: {self.shown(cell)}"
        return self.shown(cell)

    @staticmethod
    def shown(cell) -> str:
        """The cell's output area as text: streams, results, and errors (name, message, traceback)."""
        parts = []
        for output in cell.outputs:
            if output.output_type == "stream":
                parts.append(output.text)
            elif output.output_type in ("execute_result", "display_data"):
                parts.append(output.get("data", {}).get("text/plain", ""))
            elif output.output_type == "error":
                parts.append(f"ERROR {output.ename}: {output.evalue}\n" + "\n".join(output.traceback))
        return "".join(parts)


@pytest.mark.skipif(importlib.util.find_spec("nbclient") is None, reason="needs nbclient and ipykernel (the dev extra)")
def test_the_notebook_runs_in_a_jupyter_kernel_with_cells_run_twice_and_a_stopped_fit_resumed(tmp_path):
    """The seed's users run notebooks (issue 41): Keras imported in a cell before acceltrain, connect() run twice, the
    training cell stopped with the stop button (the kernel's interrupt: SIGINT, mid-fit) and run again to its end from
    the checkpoint, then a third time; what the user sees in each cell: connect's decision line, the fit's, Keras's
    progress, the stop in one line with no traceback, nothing of the stopped fit left behind. About a minute here."""
    import asyncio
    import signal

    book = _Notebook(tmp_path, EPOCHS=6, TRAIN_SAMPLES=4000, BATCH_SIZE=200)
    handlers = "import signal\nprint(signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))"

    async def session():
        async with book.client.async_setup_kernel(env=book.env):
            seen = {"keras first": await book.run("", "import keras\nprint(keras.backend.backend())")}
            for name in ("install", "parameters", "connect"):
                seen[name] = await book.run(name)
            seen["connect again"] = await book.run("connect")
            for name in ("data", "build"):
                seen[name] = await book.run(name)
            seen["handlers before"] = await book.run("", handlers)
            # Stopped once the second epoch starts: four more to land in before the fit could end by itself.
            seen["stopped"] = await book.run("train", interrupt_when=lambda shown: "Epoch 2/" in shown)
            seen["handlers after"] = await book.run("", handlers)
            for name, cell in (("resumed", "train"), ("again", "train"), ("evaluate", "evaluate")):
                seen[name] = await book.run(cell)
            return seen

    handler = signal.getsignal(signal.SIGINT)  # asyncio's runner and the kernel client may leave theirs: put back
    try:
        ran = asyncio.run(session())
    finally:
        signal.signal(signal.SIGINT, handler)
    seen = {name: re.sub(r"\x1b\[[0-9;]*m", "", shown) for name, shown in ran.items()}  # no colour
    everything = json.dumps(seen, indent=1)
    assert seen["keras first"].splitlines()[-1] == "tensorflow"  # Keras's own default, before acceltrain's import
    [banner] = [line for line in seen["connect"].splitlines() if line.startswith("acceltrain: tensorflow on cpu")]
    assert "(backend: Keras was imported before acceltrain, with Keras's own default; import acceltrain first" in \
        banner, everything  # acceltrain's own KERAS_BACKEND is not the user's
    # Run again: the runtime it opened given back (runtime.seed(0) again on it), not a second one beside it.
    [again] = [line for line in seen["connect again"].splitlines() if line.startswith("acceltrain: tensorflow")]
    assert again == banner.split(" (backend: ")[0] + " (given back: connect() opened this runtime earlier in this " \
        "process with the same options; its devices, distribution, seed and the models built in its scope are as " \
        "they were. runtime.close(), then connect(), for a new one)", everything
    stopped = seen["stopped"]
    assert "acceltrain: global batch 200 = 200 × 1 replica(s); steps_per_execution" in stopped, everything
    assert "Epoch 1/6" in stopped and re.search(r"\d+/20 .*step - accuracy", stopped), everything  # Keras's progress
    assert re.search(r"ERROR Interrupted: Stopped by SIGINT; a checkpoint is saved in checkpoints/mnist/"
                     r"epoch-000(\d)-step-\d+\. Resume with resume=True", stopped), everything
    assert "Traceback" not in stopped and "File " not in stopped and stopped.count("ERROR") == 1, everything
    assert seen["handlers after"] == seen["handlers before"], everything  # the fit's SIGINT/SIGTERM handlers gone
    done = int(re.search(r"resuming from epoch-000\d-step-\d+: (\d) epochs", seen["resumed"])[1])
    assert 1 <= done < 6 and f"Epoch {done + 1}/6" in seen["resumed"] and "Epoch 6/6" in seen["resumed"], everything
    assert "resuming from epoch-0006-step-00000: 6 epochs and 0 steps done" in seen["again"], everything
    assert all("ERROR" not in seen[name] for name in seen if name != "stopped"), everything
    accuracy = float(seen["evaluate"].rsplit("test accuracy ", 1)[1])
    assert accuracy > 0.85 and (tmp_path / "mnist_mlp.keras").is_file(), everything  # 6 epochs of 4,000: about 0.93
