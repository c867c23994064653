"""The conformance corpus: ordinary Keras scripts (tests/scripts/corpus/), each run plainly and under
acceltrain, and what each run must show. Shared by tests/commands/test_corpus.py (a handful in CI, the
rest marked slow) and benchmarks/corpus.py (the whole matrix, BENCHMARKS.md and README's table).

A run passes when it exits 0 within its timeout, prints its `metrics:` line, its metrics match the plain
run's within the mode's tolerance, its acceltrain warnings are exactly the ones SHAPES expects, and no
process it started is left running.
"""

import json
import math
import os
import re
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests import support

CORPUS = support.SCRIPTS / "corpus"
MODES = ("plain", "run-1", "run-4", "run-8", "launch-2x2")
TIMEOUT_SECONDS = 300  # each script trains for seconds; minutes mean a hang
TAG_VARIABLE = "CORPUS_RUN_TAG"  # on every process a run starts, to find any left behind


@dataclass(frozen=True)
class Tolerance:
    """|got - plain| <= absolute + relative * |plain| for each float metric; others (counts, shapes) exactly."""

    absolute: float
    relative: float


# Why these numbers: at 1 device acceltrain changes nothing a script computes (same seed, same batches, same
# order), so the metrics must be bit-identical. At 4 and 8 replicas the same global batches are summed in
# another order (and a validation split loses at most 7 samples to divisibility): the corpus's metrics then
# moved by under 1e-3 in a run where they were measured (benchmarks/corpus.py), so 0.02 absolute + 2 %
# catches a replica that trains on the wrong data. Under launch each process takes every other sample, so a
# global batch holds other samples than the plain run's: after 2 short epochs the metrics differ like two
# shuffles do. Measured (`python benchmarks/corpus.py --modes plain launch-2x2`, all 15 fit-based scripts, 51
# metrics, load average 6-11): at most 0.024 apart (callback_batch_end's first_batch_loss, 0.990 vs 0.966),
# 0.0175 on an accuracy (0.500 vs 0.518); 0.03 + 3 % leaves 2.4× that or more on every metric, and refuses
# what 0.08 + 15 % let through (0.80 vs 0.66).
# Exact, but for what the plain run itself does not compute the same way twice. TensorFlow's VAE (its CPU fits run
# without XLA): under load the plain script alone (`python vae_two_models.py`, a CPU hog on each core) printed a loss
# 1 to 3 float32 ulps from the quiet run's in 3 of 10 runs (11.1156836, 11.1156845 against 11.1156864), and `acceltrain
# run --simulate-devices 1` did the same in 1 of 2; every run's weights were bit-identical, and its
# reconstruction_loss: only the loss tracker's sum of a step's forward KL term moved, which no gradient reads. With
# TF_NUM_INTEROP_THREADS=1 it did not move in 8 of 8 plain runs at a load average of 11-15: the order its inter-op
# threads take a step's ops in, not acceltrain's doing (the op itself not isolated: a tf.function of the KL and the
# sums alone gave one result in 90,102 calls under load). So a
# Shape names such metrics in `ulps` (metric -> float32 ulps of its plain value allowed at 1 device), measured on plain
# runs; what is deterministic (the reconstruction loss, every other metric) stays exact.
EXACT = Tolerance(0.0, 0.0)
REPLICAS = Tolerance(0.02, 0.02)
PROCESSES = Tolerance(0.03, 0.03)
TOLERANCE = {"run-1": EXACT, "run-4": REPLICAS, "run-8": REPLICAS, "launch-2x2": PROCESSES}


@dataclass(frozen=True)
class Shape:
    """One script of the corpus and what its runs must show."""

    script: str  # file name in tests/scripts/corpus
    what: str  # one line for README's table
    mnist: bool = False  # takes the MNIST slice's path as its argument
    fit_based: bool = True  # trains with fit: also run under `acceltrain launch`
    warnings: tuple = ()  # substrings of the acceltrain warnings it must get in every acceltrain mode
    warnings_at: dict = field(default_factory=dict)  # mode -> more warnings it must get in that mode only
    notes_at: dict = field(default_factory=dict)  # mode -> substrings of acceltrain's lines it must print there
    loose: tuple = ()  # metrics compared with the launch tolerance in every mode (e.g. a GAN's losses)
    refused_at: dict = field(default_factory=dict)  # mode -> what acceltrain's refusal (exit 2, nothing run) must say
    ulps: dict = field(default_factory=dict)  # metric -> float32 ulps its plain runs move by themselves (EXACT's note)

    @property
    def path(self) -> Path:
        return CORPUS / self.script

    @property
    def name(self) -> str:
        return self.script.removesuffix(".py")

    def modes(self) -> tuple:
        return MODES if self.fit_based else MODES[:-1]


SMALL_BATCH_AT_8 = "each of the 8 replica(s) gets 4 sample(s) a step (global batch_size=32)"
MULTI_DEVICE = ("run-4", "run-8", "launch-2x2")
REPLICAS_OF = {"run-4": 4, "run-8": 8, "launch-2x2": 4}
SHAPES = [
    # to_categorical gives float64 labels, 128 KB of them: converting them costs nothing worth a warning.
    Shape("sequential_validation_split.py", "Sequential convnet, `fit(validation_split=0.1)`, evaluate", mnist=True),
    Shape("functional_two_in_two_out.py", "functional, two inputs and two outputs, a loss and a metric per output"),
    Shape("autoencoder_predict.py", "convolutional autoencoder `fit(x, x)`, then `predict` on 10 images",
          mnist=True),
    Shape("custom_train_step.py", "subclassed model, own `train_step`/`test_step` (JAX stateless)"),
    Shape("gan_two_optimizers.py", "GAN: two optimizers in one `train_step`"),
    Shape("distillation.py", "knowledge distillation: a model holding a teacher, own `compute_loss`", mnist=True),
    Shape("callback_batch_end.py", "a callback with `on_train_batch_end`"),
    Shape("callbacks_builtin.py", "EarlyStopping, ModelCheckpoint, ReduceLROnPlateau; best model reloaded"),
    Shape("class_and_sample_weight.py", "`class_weight`, then `sample_weight`, weighted evaluate"),
    Shape("tf_data_pipeline.py", "`tf.data` with map/batch/prefetch", mnist=True),
    Shape("py_dataset.py", "`keras.utils.PyDataset`"),
    Shape("generator.py", "a Python generator with `steps_per_epoch`"),
    Shape("repeated_dataset_steps.py", "a repeated `tf.data` dataset with `steps_per_epoch`/`validation_steps`"),
    Shape("save_load_predict.py", "`model.save` + `load_model` + `predict`; save/load_weights"),
    Shape("finetune_frozen.py", "fit, freeze the base, fit a new head, unfreeze and fine-tune"),
    Shape("custom_loop.py", "a hand-written loop that never calls `fit` (jitted stateless step)", fit_based=False),
    # Issue 22's shapes, from the scripts of others that failed on several devices.
    # Compiled on several devices, where op by op XLA's collectives deadlock.
    Shape("in_model_augmentation.py", "RandomFlip, RandomZoom and RandomCrop inside the model (Keras runs its step "
          "op by op)", mnist=True,
          notes_at={mode: ("compiling the model's step (jit_compile=True): Keras marks RandomCrop, RandomZoom as not "
                           "compilable",) for mode in MULTI_DEVICE}),
    # Fewer samples than replicas: the fit runs on one device.
    Shape("two_sample_fit.py", "a guide's `fit` on two samples, then evaluate and predict",
          notes_at={mode: (f"2 training samples, fewer than the {replicas} replicas: no batch of them divides over "
                           "them: such calls run undistributed, on one device",) for mode, replicas in REPLICAS_OF.items()}),
    # Its TensorFlow is kept; a job of several processes, which trains on JAX only, is refused naming its line.
    Shape("sets_its_backend.py", "sets `os.environ[\"KERAS_BACKEND\"] = \"tensorflow\"` before importing Keras",
          refused_at={"launch-2x2": "sets_its_backend.py, whose line 6 sets its backend"},
          notes_at={mode: ("run: the script sets its Keras backend on line 6 (os.environ['KERAS_BACKEND'] = "
                           "'tensorflow'): applied before Keras loads", "acceltrain: tensorflow on cpu")
                    for mode in ("run-1", "run-4", "run-8")}),
    # Issue 33's TensorFlow scripts. keras.random with no seed inside a tf.data map: Keras's global random state is
    # born in the dataset's function, where a mirrored variable cannot be (UnliftableError under run -4).
    Shape("tf_random_in_data_map.py", "TensorFlow: `keras.random` inside a `tf.data` map (augmentation layers and an "
          "unseeded draw)", refused_at={"launch-2x2": "tf_random_in_data_map.py, whose line 9 sets its backend"}),
    # A model with no call(): under a strategy Keras builds a model by calling it, which this one cannot answer.
    Shape("vae_two_models.py", "TensorFlow VAE: an encoder and a decoder, no `call()`, its own `train_step` "
          "(GradientTape)", refused_at={"launch-2x2": "vae_two_models.py, whose line 7 sets its backend"},
          ulps={"loss": 8},  # TensorFlow rounds its loss tracker apart from run to run under load (EXACT)
          # TensorFlow sums an own train_step's gradients over the replicas: said, with the way to step as on one device.
          notes_at={mode: (f"VAE's own train_step under {REPLICAS_OF[mode]} replicas: TensorFlow sums its gradients",)
                    for mode in ("run-4", "run-8")}),
    # One bag a step: at several replicas the fits run on one device, said; at one, no batch-size warning.
    Shape("mil_batch_one.py", "multiple-instance learning, one bag a step (`batch_size=1`)",
          notes_at={mode: (f"batch_size=1 does not divide over {replicas} replicas, and another batch would train "
                           "another way: such calls run undistributed, on one device",)
                    for mode, replicas in REPLICAS_OF.items()}),
    # Batch 32 over 8 replicas is 4 rows a device a step: under the CPU's 8, said.
    Shape("embedding_bilstm.py", "Embedding + Bidirectional LSTM on token sequences, `validation_data`",
          warnings_at={"run-8": (SMALL_BATCH_AT_8,)}),
    Shape("long_batch32_epoch.py", "300 steps of batch 32 an epoch (a residual MLP)",
          warnings_at={"run-8": (SMALL_BATCH_AT_8,)}),
    Shape("multi_input_weighted_losses.py", "three inputs, two outputs, losses weighted 1.0 and 0.2 (the functional "
          "API guide's ticket model)", warnings_at={"run-8": (SMALL_BATCH_AT_8,)}),
    # Issue 33's input shapes: every stream by the arrays' rules, batch by batch; under launch each process reads its
    # share (inputs/streams.py), and a batch of each process is cut to its 2 replicas.
    Shape("tf_data_remainder.py", "`tf.data` with a last batch that divides over no device count, `class_weight` on "
          "the dataset, evaluate on a dataset, predict on a `tf.Tensor` and a dataset",
          notes_at={**{mode: (f"x (a tf.data.Dataset): a batch that does not divide over {replicas} replicas",
                              "validation_data (a tf.data.Dataset): read into memory (250 samples)")
                       for mode, replicas in REPLICAS_OF.items() if mode != "launch-2x2"},
                    "launch-2x2": ("x (a tf.data.Dataset): each process's pipeline reads every 2nd sample of its source",
                                   "x (a tf.data.Dataset): a batch of each process that does not divide over 2 replicas",
                                   "validation_data (a tf.data.Dataset): read into memory (250 samples)")}),
    Shape("py_dataset_remainder.py", "`keras.utils.PyDataset` with a remainder, for fit, validation, evaluate and "
          "predict", notes_at={**{mode: (f"x (a keras.utils.PyDataset): a batch that does not divide over {replicas} "
                                         "replicas",) for mode, replicas in REPLICAS_OF.items() if mode != "launch-2x2"},
                               "launch-2x2": ("x (a keras.utils.PyDataset): process p reads whole batches",
                                              "x (a keras.utils.PyDataset): a batch of each process that does not "
                                              "divide over 2 replicas")}),
    Shape("grain_loader.py", "Grain's `DataLoader` (`grain.python`) with a remainder, for fit, validation and evaluate",
          notes_at={**{mode: (f"x (a Grain loader): a batch that does not divide over {replicas} replicas",)
                       for mode, replicas in REPLICAS_OF.items() if mode != "launch-2x2"},
                    "launch-2x2": ("x (a Grain loader): rebuilt with Grain's ShardOptions",
                                   "x (a Grain loader): a batch of each process that does not divide over 2 replicas")}),
    # validation_data=[x, y] as a list of 167 images: reached JAX whole (IndivisibleError) under run -4 before.
    Shape("augment_attention_split.py", "a small ViT: Normalization adapted, random flip/rotation/zoom in the model, "
          "MultiHeadAttention, `validation_data` as a list of 167 images",
          notes_at={mode: ("validation_data: each sample counted",) for mode in MULTI_DEVICE}),
    # Issue 45's public scripts. keras.io's EEG classifier: evaluate on a dataset whose last batch (74 rows) divides
    # over no replica count above 2 (a raw IndivisibleError under run -4 before streams took the arrays' rules).
    Shape("conv1d_eval_remainder.py", "Conv1D + BatchNormalization on tf.data, `class_weight`, TopK/AUC/Precision/"
          "Recall, callbacks on a validation metric, evaluate on a dataset whose last batch is 74 rows",
          notes_at={mode: ("x (a tf.data.Dataset): read into memory (586 samples)",
                           "validation_data (a tf.data.Dataset): read into memory (586 samples)")
                    for mode in ("run-4", "run-8")}),
    # keras.io's FeatureSpace model on TensorFlow: predict on a dict of one-sample tensors, one of them tf.string,
    # which acceltrain read into an array of objects ("Invalid dtype: object" at 1, 4 and 8 devices).
    Shape("feature_space_raw_dict.py", "TensorFlow: `FeatureSpace` preprocessing in tf.data, then an inference model "
          "called on a dict of raw values (a string among them)",
          refused_at={"launch-2x2": "feature_space_raw_dict.py, whose line 8 sets its backend"}),
    # keras.io's text classification from scratch on TensorFlow: an end-to-end model on raw strings, evaluated. Keras
    # builds a model under a strategy from the first batch's mean over the replicas, which strings do not have (AddN
    # refused tf.string at 4 devices): keras_internals.built_from_one_replica.
    Shape("text_vectorization_strings.py", "TensorFlow: `TextVectorization` adapted on strings, an end-to-end model "
          "on raw strings evaluated", refused_at={"launch-2x2": "text_vectorization_strings.py, whose line 7 sets its "
                                                               "backend"}),
    # keras.io's endpoint layer on TensorFlow: a loss added by a layer, computed by a keras.losses.Loss, which Keras
    # divides by the replicas twice under a strategy (its loss 1/4 of plain's at 4 replicas, 1/8 at 8):
    # keras_internals.added_losses_scaled_once.
    Shape("add_loss_endpoint.py", "TensorFlow: a layer's own loss (`add_loss`), a model called on a dict with no "
          "targets, compiled with no loss", refused_at={"launch-2x2": "add_loss_endpoint.py, whose line 7 sets its "
                                                                      "backend"},
          warnings_at={"run-8": (SMALL_BATCH_AT_8,)}),
    # keras.io's TensorFlow NumPy models: keras.backend.clear_session() between its models reset the strategy's scope
    # acceltrain entered around the script (the later models undistributed, then "IndexError: pop from empty list"
    # at 4 and 8 devices): backends/tensorflow.py::scope leaves the scope for the reset.
    Shape("tf_numpy_models.py", "TensorFlow: models and a loss written with `tf.experimental.numpy`, 8 fits, "
          "`clear_session()`, the script's own strategy scope, TensorBoard", refused_at={
              "launch-2x2": "tf_numpy_models.py, whose line 8 sets its backend"},
          warnings_at={"run-8": (SMALL_BATCH_AT_8,)}),
    # A newcomer's shapes. Keras's own BackupAndRestore, LearningRateScheduler, CSVLogger and
    # TerminateOnNaN beside a fit (with --checkpoint-dir BackupAndRestore is refused: checks.resumable_arguments).
    Shape("keras_callbacks_logging.py", "BackupAndRestore, LearningRateScheduler, CSVLogger, TerminateOnNaN, "
          "`validation_split`, then a second fit"),
    # fit twice, initial_epoch, validation_freq, a weighted validation tuple, and int()/float() of the optimizer's
    # variables, which under run's MirroredStrategy raised TypeError (keras_internals.strategies); steps_per_execution=4,
    # which Keras cannot run under MirroredStrategy on CPUs (decisions.choose_steps_per_execution_mirrored): said.
    Shape("tf_fit_twice_numbers.py", "TensorFlow: `fit` twice (`initial_epoch`, `validation_freq=2`, a weighted "
          "validation tuple), `steps_per_execution=4`, then `int(optimizer.iterations)`", refused_at={
              "launch-2x2": "tf_fit_twice_numbers.py, whose line 8 sets its backend"},
          warnings_at={"run-4": ("steps_per_execution 1 under MirroredStrategy over 4 CPU replicas, not the model's 4",),
                       "run-8": ("steps_per_execution 1 under MirroredStrategy over 8 CPU replicas, not the model's 4",
                                 "each of the 8 replica(s) gets 6 sample(s) a step (global batch_size=48)")}),
    # A newcomer's dict model: its validation_split's samples lost their sample_weight under acceltrain (an unweighted
    # val_loss at every device count), and at 4 and 8 devices its evaluate on one device (batch 10) reused the test
    # function compiled for the fit's validation over every device ("Received incompatible devices").
    Shape("weighted_dict_validation.py", "dict inputs and outputs, `loss_weights`, `sample_weight` with "
          "`validation_split`, a weighted validation tuple, evaluate and predict on batches no device count divides",
          warnings_at={"run-8": (SMALL_BATCH_AT_8,)},
          notes_at={mode: (f"batch_size=10 does not divide over {replicas} replicas, and acceltrain keeps the script's "
                           "batch: such calls run undistributed",)
                    for mode, replicas in REPLICAS_OF.items()}),
]
BY_NAME = {shape.name: shape for shape in SHAPES}


@dataclass
class Outcome:
    """One run of one script in one mode, as seen from outside."""

    shape: str
    mode: str
    returncode: int | None  # None: timed out
    seconds: float
    stdout: str
    stderr: str
    metrics: dict | None
    warnings: list
    left_running: list  # processes of this run still alive after it ended (killed since)

    @property
    def summary(self) -> str:
        """acceltrain's closing line: what it distributed."""
        lines = [line for line in self.stderr.splitlines() if line.startswith("acceltrain: run: ")]
        return lines[-1].removeprefix("acceltrain: run: ") if lines else ""

    @property
    def refused(self) -> bool:
        return self.returncode == 2 and "acceltrain: error:" in self.stderr


def command(shape: Shape, mode: str, data: Path | None) -> list:
    args = [shape.path, *([data] if shape.mnist else [])]
    if mode == "plain":
        return ["python", *args]
    if mode.startswith("run-"):
        return ["acceltrain", "run", "--simulate-devices", mode.removeprefix("run-"), *args]
    if mode == "launch-2x2":
        return ["acceltrain", "launch", "--processes", "2", "--simulate-devices", "2", *args]
    raise ValueError(f"Received mode={mode!r}. Valid: {MODES}")


def run(shape: Shape, mode: str, data: Path | None, timeout: float = TIMEOUT_SECONDS) -> Outcome:
    """Run `shape` in `mode` (plainly on the JAX backend, or through acceltrain) and collect what it showed."""
    tag = uuid.uuid4().hex
    args = command(shape, mode, data)
    start = time.perf_counter()
    try:
        if args[0] == "python":
            done = support.python(*args[1:], timeout=timeout, KERAS_BACKEND="jax", **{TAG_VARIABLE: tag})
        else:
            done = support.run_cli(*args[1:], timeout=timeout, **{TAG_VARIABLE: tag})
        returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as timed_out:
        returncode, stdout, stderr = None, _text(timed_out.stdout), _text(timed_out.stderr)
    seconds = time.perf_counter() - start
    left = kill_left_running(tag)
    return Outcome(shape.name, mode, returncode, seconds, stdout, stderr, parse_metrics(stdout),
                   acceltrain_warnings(stderr), left)


def _text(output) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


def parse_metrics(stdout: str, process: int = 0) -> dict | None:
    """The last `metrics: {json}` line (under launch, that of `process`: "[0] metrics: ...")."""
    for line in reversed(stdout.splitlines()):
        line = line.removeprefix(f"[{process}] ").removeprefix("[all] ")  # "[all]": every process said it alike
        if line.startswith("metrics: "):
            return json.loads(line.removeprefix("metrics: "))
    return None


def acceltrain_warnings(stderr: str) -> list:
    """acceltrain's warnings, each once (under launch each process prints its own)."""
    found = []
    for line in stderr.splitlines():
        line = line.split("] ", 1)[1] if line.startswith("[") and "] " in line else line
        if line.startswith("acceltrain: warning:"):
            text = line.removeprefix("acceltrain: warning:").strip()
            if text.startswith("straggler:"):  # the machine's load on one process, not the script's doing
                continue
            found += [text] if text not in found else []
    return found


def kill_left_running(tag: str) -> list:
    """Processes still carrying this run's tag (a child or grandchild that outlived it): killed, and listed."""
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # ended meanwhile, or not ours
            continue
        if f"{TAG_VARIABLE}={tag}".encode() in environ.split(b"\0"):
            left.append(f"{entry.name} {cmdline[:120]}")
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass
    return left


def mismatches(plain: dict, got: dict, tolerance: Tolerance, loose=(), ulps=None) -> list:
    """Each metric of `got` that differs from `plain` by more than `tolerance`: 'name: got vs plain'. `ulps`: metric ->
    the float32 ulps of its plain value an EXACT comparison allows it (the plain run's own rounding)."""
    if set(plain) != set(got):
        return [f"metric names {sorted(got)} vs plain {sorted(plain)}"]
    found = []
    for name, expected in plain.items():
        value = got[name]
        allowed = PROCESSES if name in loose and tolerance is not EXACT else tolerance
        if tolerance is EXACT and name in (ulps or {}) and isinstance(expected, float):
            allowed = Tolerance(ulps[name] * float32_ulp(expected), 0.0)
        if isinstance(expected, float) and isinstance(value, (int, float)):
            if not math.isfinite(value) or abs(value - expected) > allowed.absolute + allowed.relative * abs(expected):
                found.append(f"{name}: {value!r} vs plain {expected!r}")
        elif value != expected:
            found.append(f"{name}: {value!r} vs plain {expected!r}")
    return found


def float32_ulp(value: float) -> float:
    """The gap from `value` (a float32's) to the next float32 away from zero: 2**-20 for 11.1."""
    return 2.0 ** (math.frexp(abs(value))[1] - 24) if value else 2.0 ** -149


def problems(shape: Shape, outcome: Outcome, plain: Outcome | None) -> list:
    """Everything wrong with `outcome` (empty: it passes). `plain` is the same script's plain run."""
    found = []
    refusal = shape.refused_at.get(outcome.mode)
    if refusal is not None:  # refused for what it is: exit 2, the message, and nothing left running
        if not outcome.refused or refusal not in outcome.stderr:
            found.append(f"not refused with {refusal!r}: exit {outcome.returncode}: {last_error_line(outcome.stderr)}")
        return found + ([f"left running: {outcome.left_running}"] if outcome.left_running else [])
    if outcome.returncode is None:
        found.append(f"timed out after {outcome.seconds:.0f} s")
    elif outcome.returncode != 0:
        found.append(f"exit {outcome.returncode}: {last_error_line(outcome.stderr)}")
    if outcome.left_running:
        found.append(f"left running: {outcome.left_running}")
    if outcome.returncode == 0 and outcome.metrics is None:
        found.append("no 'metrics:' line")
    if outcome.mode != "plain":
        if outcome.metrics is not None and plain is not None and plain.metrics is not None:
            found += mismatches(plain.metrics, outcome.metrics, TOLERANCE[outcome.mode], shape.loose,
                                shape.ulps)
        expected = (*shape.warnings, *shape.warnings_at.get(outcome.mode, ()))
        found += warning_problems(expected, outcome.warnings)
        found += [f"missing line {note!r}" for note in shape.notes_at.get(outcome.mode, ())
                  if not any(note in line and "acceltrain: " in line for line in outcome.stderr.splitlines())]
    if outcome.mode == "launch-2x2" and outcome.metrics is not None:
        other = parse_metrics(outcome.stdout, process=1)  # one job: both processes print the global metrics
        if other != outcome.metrics:
            found.append(f"process 1 printed {other}, process 0 {outcome.metrics}")
    return found


def warning_problems(expected, got) -> list:
    """Every expected warning present, and nothing else."""
    missing = [text for text in expected if not any(text in warning for warning in got)]
    unexpected = [warning for warning in got if not any(text in warning for text in expected)]
    return [f"missing warning {text!r}" for text in missing] + [f"unexpected warning {w!r}" for w in unexpected]


def last_error_line(stderr: str) -> str:
    """The line that says what went wrong: acceltrain's error, XLA's abort, the script's exception, else the
    last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    exception = re.compile(r"^(\[\d+\] )?[\w.]*(Error|Exception|Interrupt)\b.*:")
    for found in (lambda line: "acceltrain: error:" in line, lambda line: "Termination timeout" in line,
                  lambda line: "Check failed" in line, exception.match):
        hits = [line for line in lines if found(line)]
        if hits:
            return hits[-1][:300]
    return lines[-1][:300] if lines else ""
