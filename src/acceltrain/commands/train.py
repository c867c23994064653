"""`acceltrain train`: one job from a config to a folder of outputs, as one function.

    train_and_evaluate(TrainConfig(seed=1, out="runs/a"))

Everything the user can get wrong is checked before training starts, and nothing is written to the
output folder until training has finished.
"""

import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from acceltrain.commands import config as config_files
from acceltrain.commands.config import TrainConfig
from acceltrain import datasets, decisions, log, options, preemption, recipes, sharding, user_model
from acceltrain.inputs import arrays
from acceltrain.commands import outputs, report
from acceltrain.training import tensorboard_logs
from acceltrain.training.checkpoint import Checkpoints, save_where_nobody_looks
from acceltrain.errors import UsageError, positive_int
from acceltrain.arguments import check_device_data, check_seed
from acceltrain.runtime import Settings


def train_and_evaluate(config: TrainConfig, *, started: float | None = None) -> dict:
    """Train, evaluate on the test split, write model.keras, model.weights.h5 and metrics.json, and say in one line
    where the run's time went (metrics.json's `ledger`). `started`: when the run began (time.time()), the ledger's
    start-up counted from it: the CLI passes the interpreter's start; default: this call's."""
    started = time.time() if started is None else started
    # 1. Check everything that needs no framework; say the job, its defaults and how to change them.
    job = _check(config)
    said = job_line(config, job.recipe, job.epochs, job.batch_size, arrays.num_samples(job.splits.x_train))
    log.info(said)

    # 2. Connect, then build the model with its weights placed.
    with log.phase("connecting to the hardware"):
        runtime = Settings.read(config).connect()
    window = None
    with preemption.ledger_told_when_preempted(lambda: window, lambda ledger: log.info(ledger.line())), \
            runtime.timeline.window(started, start_up_until=time.time()) as window:
        arrays.check_batch_size(job.batch_size, runtime.num_replicas)
        runtime.seed(config.seed)
        model, (x_train, y_train), (x_test, y_test) = _build(runtime, config, job)
        arrays.check_arrays(x_test, y_test, name="x_test")
        outputs.check_free_space(job.out_dir, _bytes_needed(model, config.keep_checkpoints))

        # 3. Train (checkpointing into out_dir) and evaluate.
        fit_started = time.time()
        history = _train(runtime, model, x_train, y_train, config, job)
        test = runtime.evaluate(model, x_test, y_test, batch_size=job.batch_size, verbose=0)

        # 4. Write the model, each file atomically. Keras's saving (and the optimizer's config) would import
        # TensorFlow, where it is installed, only to find no TensorFlow object in a JAX model: the ledger booked
        # the import as most of the run's rest (keras_internals.saving_without_tensorflow).
        from acceltrain.backends import keras_internals

        with keras_internals.saving_without_tensorflow():
            _save_model(runtime.process_index, model, job.out_dir)
            optimizer = optimizer_summary(model)  # what trained, whatever --learning-rate said
        # 5. The records of the run: config.toml and the report (its ledger: the run until the report was drawn),
        # then metrics.json, whose ledger runs to the end of these writes (the CLI then leaves at once).
        epoch_seconds = history.epoch_seconds
        timed = getattr(history, "timed_epochs", None) or [
            {"epoch": number, "seconds": seconds, "steps": math.ceil(arrays.num_samples(x_train) / job.batch_size)}
            for number, seconds in enumerate(epoch_seconds, 1)]
        metrics = {
            "job": said.removeprefix("the job: "),
            "test_accuracy": test.get("accuracy"),
            "test_loss": test.get("loss"),
            "test_metrics": test,
            "history": {name: [float(v) for v in values] for name, values in history.history.items()},
            "epoch_seconds": epoch_seconds,  # each epoch's, whichever process ran it (a resumed run: several)
            "timed_epochs": timed,  # the epochs this process ran, with the steps it ran of each
            "first_epoch_seconds": timed[0]["seconds"],  # this process's first: it compiles
            "seconds_to_first_epoch_end": fit_started - started + timed[0]["seconds"],
            **throughput(timed, job.batch_size),
            "config": {**asdict(config), "epochs": job.epochs, "batch_size": job.batch_size, "out": str(job.out_dir)},
            "optimizer": optimizer,
            "runtime": runtime.describe(),
        }
        resolved = replace(config, epochs=job.epochs, batch_size=job.batch_size, out=str(job.out_dir),
                           backend=runtime.backend)
        so_far = runtime.timeline.so_far(window)
        _write_report(runtime.process_index, {**metrics, "ledger": so_far.as_json() if so_far else None}, resolved)
    # Where the run's time went, from the interpreter's start to here (None with ACCELTRAIN_LEDGER=0).
    metrics["ledger"] = window.ledger.as_json() if window.ledger else None
    if runtime.process_index == 0:
        outputs.write_json(job.out_dir / "metrics.json", metrics)
    if window.ledger:
        log.info(window.ledger.line())
    return metrics


def _write_report(process_index: int, metrics: dict, resolved: TrainConfig) -> None:
    """config.toml and the report, each written atomically by process 0 (metrics.json follows, written by the caller
    once the ledger is closed)."""
    if process_index > 0:
        return
    out_dir = Path(resolved.out)
    config_files.write(out_dir / "config.toml", resolved)
    log.debug(f"wrote {', '.join(path.name for path in report.write(out_dir, metrics))}, config.toml and metrics.json")
    log.info(f"outputs in {out_dir}")


@dataclass
class _Job:
    """A config checked, with what follows from it: its recipe's defaults filled in, its folders and its data."""

    recipe: object
    epochs: int
    batch_size: int
    out_dir: Path
    checkpoints: Checkpoints
    splits: object  # datasets.Splits
    load_model: object = None  # --model FILE.py:FUNCTION, loaded when called
    asked: object = None  # options.Checkpoints: --out's checkpoints folder, --checkpoint-every, --keep-checkpoints


def _check(config: TrainConfig) -> _Job:
    """Everything that needs no framework, checked before anything starts or is written."""
    recipe = recipes.get(config.recipe)
    epochs = positive_int(config.epochs if config.epochs is not None else recipe.EPOCHS, "--epochs")
    batch_size = positive_int(config.batch_size if config.batch_size is not None else recipe.BATCH_SIZE, "--batch-size")
    if config.learning_rate is not None and not (config.learning_rate > 0 and math.isfinite(config.learning_rate)):
        raise UsageError(f"Received --learning-rate {config.learning_rate}. Expected a positive number, e.g. 1e-3.")
    if not (0 <= config.validation_split < 1):
        raise UsageError(f"Received --validation-split {config.validation_split}. Expected a fraction of the training "
                         "samples from 0 up to (not including) 1, e.g. 0.1; 0 holds none out.")
    check_seed(config.seed, "--seed")
    load_model = user_model.builder(config.model) if config.model else None
    if config.device_memory is not None:
        sharding.parse_bytes(config.device_memory, "--device-memory")
    check_device_data(config.device_data)
    decisions.check_distribution(config.distribution, config.backend)
    out_dir = Path(config.out) if config.out else outputs.default_out_dir()
    outputs.check_writable(out_dir)
    _check_out_dir_is_free(out_dir, config)
    asked = options.Checkpoints(out_dir / "checkpoints", config.checkpoint_every, config.keep_checkpoints,
                                config.resume)
    checkpoints = Checkpoints(asked.folder, asked.keep)
    if config.tensorboard:
        tensorboard_logs.check_available()
    if config.data is None and hasattr(recipe, "make_splits"):
        splits = recipe.make_splits(config.seed)  # the recipe's own synthetic data
    else:
        splits = datasets.load_npz(config.data or datasets.MNIST_PATH)
    return _Job(recipe, epochs, batch_size, out_dir, checkpoints, splits, load_model, asked)


def _build(runtime, config: TrainConfig, job: _Job):
    """The model, built by runtime.build (its weights born placed; 'auto' measures it first), and the (x, y) of
    training and of the test: the recipe's preprocessed, or the data as they are for a --model."""
    splits, recipe = job.splits, job.recipe
    # A model that does not fit names its `acceltrain plan` line: the job as the CLI knows it.
    plan_job = {"model": config.model} if job.load_model else {"recipe": recipe.NAME}
    plan_job["batch_size"] = job.batch_size
    if job.load_model:
        told = []  # runtime.build calls build for each layout it weighs, then to build: say it once

        def build():
            model = job.load_model()
            if not model.compiled:
                _compile_for_labels(model, splits.y_train, config.learning_rate, say=not told)
            elif config.learning_rate is not None and not told:
                log.warn(_learning_rate_not_used(config.learning_rate, config.model, model))
            told.append(True)
            return model

        model = runtime.build(build, job=plan_job, batch_size=job.batch_size, autopilot=config.autopilot)
        return model, (splits.x_train, splits.y_train), (splits.x_test, splits.y_test)
    train = _recipe_inputs(recipe, splits.x_train, splits.y_train, "train")
    test = _recipe_inputs(recipe, splits.x_test, splits.y_test, "test")
    trained_on = int(arrays.num_samples(train[0]) * (1 - config.validation_split))  # x may be a dict of arrays
    steps_per_epoch = math.ceil(trained_on / job.batch_size)

    def build():  # Runtime.build gives its weights their values from one program; each fit's placement (JAX) makes
        # the optimizer's slots in one and takes the metrics' results from the last step, as for any model
        return recipe.build_model(learning_rate=config.learning_rate, total_steps=job.epochs * steps_per_epoch)

    model = runtime.build(
        build,
        layout_map=getattr(recipe, "layout_map", None), job=plan_job, batch_size=job.batch_size,
        autopilot=config.autopilot)
    return model, train, test


def _train(runtime, model, x_train, y_train, config: TrainConfig, job: _Job):
    """Runtime.fit, checkpointing into out_dir/checkpoints (resumed with --resume): Keras's History."""
    from acceltrain.training.progress import FirstStepStatus
    from acceltrain.training.resumable import Interrupted

    if config.overwrite:
        job.checkpoints.clear()
    first_step = FirstStepStatus()
    callbacks = [first_step]
    if config.tensorboard:  # TensorBoard writes while training runs: that is what it is for
        callbacks.append(tensorboard_logs.callback(job.out_dir))
    try:
        with first_step:
            return runtime.fit(model, x_train, y_train, batch_size=job.batch_size, epochs=job.epochs,
                               validation_split=config.validation_split,
                               callbacks=callbacks, verbose=_progress_verbosity(), checkpoints=job.asked,
                               autopilot=config.autopilot)
    except Interrupted as stopped:
        raise Interrupted(stopped.signum, stopped.checkpoint, f"the same command plus --resume (acceltrain train "
                                                              f"... --out {job.out_dir} --resume)") from None


def job_line(config: TrainConfig, recipe, epochs: int, batch_size: int, samples: int) -> str:
    """The job in one line: what trains, for how long, on which samples, and where each figure came from (a --model
    takes the recipe's epochs and batch, which were not chosen for it: said, with the flags that set them)."""
    held = samples - int(samples * (1 - config.validation_split))  # as arrays.split_validation cuts it
    steps = math.ceil((samples - held) / batch_size)
    left = [(flag, what) for flag, what, value in (("--epochs", "epochs", config.epochs),
                                                   ("--batch-size", "batch size", config.batch_size)) if value is None]
    source = ""
    if left:
        whose = f"the {recipe.NAME} recipe's" + (", not chosen for your model" if config.model else "")
        source = (f" ({' and '.join(what for _, what in left)}: {whose}; "
                  f"{' and '.join(flag + ' N' for flag, _ in left)} to change)")
    validation = (f"the last {held:,} of the {samples:,} training samples held out to validate on after each epoch "
                  f"(--validation-split {config.validation_split:g}; 0 trains on all)") if held else \
        f"none held out (--validation-split {config.validation_split:g})"
    return (f"the job: {config.model or recipe.NAME}, {epochs} epoch{'s' * (epochs != 1)} of {steps} step"
            f"{'s' * (steps != 1)} at global batch {batch_size}{source}; validation: {validation}")


def _save_model(process_index: int, model, out_dir: Path) -> None:
    """model.keras and model.weights.h5, each written atomically by process 0; the other processes of a job save
    where nobody looks (reading the weights is a step they all take)."""
    if process_index > 0:
        save_where_nobody_looks(model.save, "model.keras")
        save_where_nobody_looks(model.save_weights, "model.weights.h5")
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    with outputs.atomic_path(out_dir / "model.keras") as path:
        model.save(path)
    with outputs.atomic_path(out_dir / "model.weights.h5") as path:
        model.save_weights(path)


def _check_out_dir_is_free(out_dir: Path, config: TrainConfig) -> None:
    """Never clobber a previous run silently: a folder with files needs --resume or --overwrite."""
    if config.resume and config.overwrite:
        raise UsageError("Received both --resume and --overwrite. Pass --resume to continue the run in --out, "
                         "or --overwrite to start it again.")
    if config.resume or config.overwrite or not out_dir.is_dir():
        return
    present = sorted(p.name for p in out_dir.iterdir())
    if present:
        shown = ", ".join(present[:4]) + (", ..." if len(present) > 4 else "")
        raise UsageError(f"--out {str(out_dir)!r} already holds files ({shown}). Pass --resume to continue its "
                         "run, --overwrite to replace it, or another --out.")


def _bytes_needed(model, keep_checkpoints: int) -> int:
    """Checkpoints (weights and up to two optimizer slots each) plus model.keras and model.weights.h5."""
    weight_bytes = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in model.weights)
    return weight_bytes * (3 * (keep_checkpoints + 1) + 6)


def _progress_verbosity():
    """Keras's progress bar on a terminal; one line per epoch in logs and CI; none with --quiet."""
    if log.is_quiet():
        return 0
    return 1 if sys.stdout.isatty() else 2


def throughput(timed: list[dict], batch_size: int) -> dict:
    """Training samples per second, from what this process ran and timed only: the steps it ran of each epoch
    (a resumed epoch's, not the whole epoch's) over their seconds, after its first epoch (which compiles), or
    that one alone (then said). An earlier process's epochs are not timed here: its compile and its start
    would be counted for nothing, or not at all."""
    steady = timed[1:] or timed
    return {"samples_per_second": batch_size * sum(e["steps"] for e in steady) / sum(e["seconds"] for e in steady),
            "samples_per_second_epochs": [e["epoch"] for e in steady],
            "samples_per_second_includes_compile": not timed[1:]}


def _recipe_inputs(recipe, x, y, split):
    try:
        return recipe.preprocess(x, y)
    except ValueError as error:
        raise UsageError(f"x_{split} of shape {x.shape} does not fit the {recipe.NAME} recipe ({error}).") from None


def optimizer_summary(model) -> str:
    """The optimizer the model trained with and its learning rate, e.g. "RMSprop, lr CosineDecay from 0.002"."""
    optimizer = model.optimizer
    rate = optimizer.get_config().get("learning_rate")
    if isinstance(rate, dict):  # a schedule, serialized
        start = rate.get("config", {}).get("initial_learning_rate")
        rate = f"{rate.get('class_name', 'schedule')}" + (f" from {start:g}" if isinstance(start, (int, float)) else "")
    elif isinstance(rate, (int, float)):
        rate = f"{rate:g}"
    return f"{type(optimizer).__name__}, lr {rate}"


def _learning_rate_not_used(learning_rate: float, spec: str, model) -> str:
    return (f"--learning-rate {learning_rate:g} is not used: --model {spec} returned a compiled model, which trains "
            f"with the optimizer it was compiled with ({optimizer_summary(model)}). To train at {learning_rate:g}, "
            "return the model uncompiled (acceltrain then compiles it with Adam at --learning-rate), or set the "
            "rate in its compile().")


def _compile_for_labels(model, y: np.ndarray, learning_rate: float | None, say: bool = True) -> None:
    """Compile a model given uncompiled, with the loss its labels call for, and say so (`say`)."""
    import keras

    output_units = model.output_shape[-1] if isinstance(model.output_shape, tuple) else None
    loss_name, reason = decisions.choose_loss(y, output_units)
    activation = getattr(getattr(model.layers[-1], "activation", None), "__name__", "")
    probabilities = activation in ("softmax", "sigmoid")
    loss_class = getattr(keras.losses, loss_name)
    classifier = "Crossentropy" in loss_name
    loss = loss_class(from_logits=not probabilities) if classifier else loss_class()
    metrics = ["accuracy"] if classifier else ["mae"]
    rate = learning_rate if learning_rate is not None else 1e-3
    model.compile(optimizer=keras.optimizers.Adam(rate), loss=loss, metrics=metrics)
    if say:
        log.info(f"compiled the model: {loss_name}{'' if probabilities else ' (from logits)'} ({reason}), "
                 f"Adam {rate:g}, metrics {metrics}")
