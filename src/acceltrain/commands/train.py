"""`acceltrain train`: one job from a config to a folder of outputs, as one function.

    train_and_evaluate(TrainConfig(seed=1, out="runs/a"))

Everything the user can get wrong is checked before training starts, and nothing is written to the
output folder until training has finished.
"""

import importlib.util
import math
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from acceltrain.commands import config as config_files
from acceltrain.commands.config import TrainConfig
from acceltrain import data, datasets, decisions, log, placement, recipes, sharding
from acceltrain.commands import outputs, report
from acceltrain.training import tensorboard_logs
from acceltrain.training.checkpoint import Checkpoints, Every
from acceltrain.errors import UsageError, positive_int
from acceltrain.runtime import connect


def train_and_evaluate(config: TrainConfig) -> dict:
    """Train, evaluate on the test split, write model.keras, model.weights.h5 and metrics.json."""
    started = time.perf_counter()
    # 1. Check everything that needs no framework.
    recipe = recipes.get(config.recipe)
    epochs = positive_int(config.epochs if config.epochs is not None else recipe.EPOCHS, "--epochs")
    batch_size = positive_int(config.batch_size if config.batch_size is not None else recipe.BATCH_SIZE, "--batch-size")
    if config.learning_rate is not None and not (config.learning_rate > 0 and math.isfinite(config.learning_rate)):
        raise UsageError(f"Received --learning-rate {config.learning_rate}. Expected a positive number, e.g. 1e-3.")
    model_file, function_name = _parse_model_spec(config.model) if config.model else (None, None)
    if config.device_memory is not None:
        sharding.parse_bytes(config.device_memory, "--device-memory")
    decisions.check_distribution(config.distribution, config.backend)
    out_dir = Path(config.out) if config.out else outputs.default_out_dir()
    outputs.check_writable(out_dir)
    _check_out_dir_is_free(out_dir, config)
    checkpoints = Checkpoints(out_dir / "checkpoints", positive_int(config.keep_checkpoints, "--keep-checkpoints"))
    Every.parse(config.checkpoint_every)
    if config.tensorboard:
        tensorboard_logs.check_available()
    if config.data is None and hasattr(recipe, "make_splits"):
        splits = recipe.make_splits(config.seed)  # the recipe's own synthetic data
    else:
        splits = datasets.load_npz(config.data or datasets.MNIST_PATH)

    # 2. Connect, then build the model inside the distribution's scope.
    with log.phase("connecting to the hardware"):
        runtime = connect(config.backend, simulate_devices=config.simulate_devices, distribution=config.distribution,
                          platform=config.platform, tpu=config.tpu, stall_timeout=config.stall_timeout,
                          device_memory=config.device_memory, precision=config.precision)
    data.check_batch_size(batch_size, runtime.num_replicas)
    runtime.seed(config.seed)
    placement.describe_job(runtime, recipe=None if model_file else recipe.NAME, model=config.model,
                           batch_size=batch_size)  # a model that does not fit names its `acceltrain plan` line
    if model_file:
        x_train, y_train, x_test, y_test = splits.x_train, splits.y_train, splits.x_test, splits.y_test

        def build():
            model = _load_user_model(model_file, function_name)
            if not model.compiled:
                _compile_for_labels(model, y_train, config.learning_rate)
            elif config.learning_rate is not None:
                log.warn(_learning_rate_not_used(config.learning_rate, config.model, model))
            return model

        model = runtime.build(build)  # weights born placed; 'auto' measures the model first
    else:
        x_train, y_train = _recipe_inputs(recipe, splits.x_train, splits.y_train, "train")
        x_test, y_test = _recipe_inputs(recipe, splits.x_test, splits.y_test, "test")
        steps_per_epoch = math.ceil(data.num_samples(x_train) / batch_size)  # x may be a dict of arrays
        model = runtime.build(
            lambda: recipe.build_model(learning_rate=config.learning_rate, total_steps=epochs * steps_per_epoch),
            layout_map=getattr(recipe, "layout_map", None))
    data.check_arrays(x_test, y_test, name="x_test")
    outputs.check_free_space(out_dir, _bytes_needed(model, config.keep_checkpoints))

    # 3. Train (checkpointing into out_dir) and evaluate.
    if config.overwrite:
        checkpoints.clear()
    from acceltrain.training.progress import FirstStepStatus
    from acceltrain.training.resumable import Interrupted

    first_step = FirstStepStatus()
    callbacks = [first_step]
    if config.tensorboard:  # TensorBoard writes while training runs: that is what it is for
        callbacks.append(tensorboard_logs.callback(out_dir))
    fit_started = time.perf_counter()
    try:
        with first_step:
            history = runtime.fit(model, x_train, y_train, batch_size=batch_size, epochs=epochs, callbacks=callbacks,
                                  verbose=_progress_verbosity(), checkpoint_dir=checkpoints.folder,
                                  resume=config.resume, checkpoint_every=config.checkpoint_every,
                                  keep_checkpoints=config.keep_checkpoints)
    except Interrupted as stopped:
        stopped.args = (f"{stopped.args[0].split(' Resume with')[0]} Resume with the same command plus --resume "
                        f"(acceltrain train ... --out {out_dir} --resume).",)
        raise
    test = runtime.evaluate(model, x_test, y_test, batch_size=batch_size, verbose=0)
    epoch_seconds = history.epoch_seconds
    timed = getattr(history, "timed_epochs", None) or [
        {"epoch": number, "seconds": seconds, "steps": math.ceil(data.num_samples(x_train) / batch_size)}
        for number, seconds in enumerate(epoch_seconds, 1)]

    # 4. Write the outputs, each atomically.
    metrics = {
        "test_accuracy": test.get("accuracy"),
        "test_loss": test.get("loss"),
        "test_metrics": test,
        "history": {name: [float(v) for v in values] for name, values in history.history.items()},
        "epoch_seconds": epoch_seconds,  # each epoch's, whichever process ran it (a resumed run: several)
        "timed_epochs": timed,  # the epochs this process ran, with the steps it ran of each
        "first_epoch_seconds": timed[0]["seconds"],  # this process's first: it compiles
        "seconds_to_first_epoch_end": fit_started - started + timed[0]["seconds"],
        **throughput(timed, batch_size),
        "config": {**asdict(config), "epochs": epochs, "batch_size": batch_size, "out": str(out_dir)},
        "optimizer": optimizer_summary(model),  # what trained, whatever --learning-rate said
        "runtime": runtime.describe(),
    }
    if runtime.process_index > 0:
        _save_for_nobody(model)  # process 0 writes; the others take their part in reading the weights
        return metrics
    out_dir.mkdir(parents=True, exist_ok=True)
    with outputs.atomic_path(out_dir / "model.keras") as path:
        model.save(path)
    with outputs.atomic_path(out_dir / "model.weights.h5") as path:
        model.save_weights(path)
    outputs.write_json(out_dir / "metrics.json", metrics)
    resolved = replace(config, epochs=epochs, batch_size=batch_size, out=str(out_dir), backend=runtime.backend)
    config_files.write(out_dir / "config.toml", resolved)
    log.debug(f"wrote {', '.join(path.name for path in report.write(out_dir, metrics))} and config.toml")
    log.info(f"outputs in {out_dir}")
    return metrics


def _save_for_nobody(model) -> None:
    """In a multi-process job, reading the weights is a step every process takes, or process 0 waits for
    ever: the other processes save too, to a folder thrown away."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="acceltrain-discarded-") as folder:
        model.save(Path(folder) / "model.keras")
        model.save_weights(Path(folder) / "model.weights.h5")


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


# --- --model FILE.py:FUNCTION -----------------------------------------------------------------

def _parse_model_spec(spec: str) -> tuple[Path, str]:
    file, _, function = spec.rpartition(":")
    if not file or not function.isidentifier():
        raise UsageError(f"Received --model {spec!r}. Expected FILE.py:FUNCTION, e.g. --model models.py:build.")
    path = Path(file)
    if not path.is_file():
        raise UsageError(f"Received --model {spec!r}, but {file!r} is not a file. Pass the path of a .py file.")
    return path, function


def _load_user_model(path: Path, function_name: str):
    """Import the file and call FUNCTION() for a keras.Model. The file's own errors name the file."""
    import keras

    module_spec = importlib.util.spec_from_file_location(f"acceltrain_user_model_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as error:
        raise UsageError(f"Importing the model file {str(path)!r} failed: {type(error).__name__}: {error}") from error
    function = getattr(module, function_name, None)
    if not callable(function):
        found = sorted(name for name, value in vars(module).items() if callable(value) and not name.startswith("_"))
        raise UsageError(f"{str(path)!r} has no function {function_name!r}. Functions there: "
                         f"{', '.join(found) or 'none'}. Pass --model {path}:NAME.")
    model = function()
    if not isinstance(model, keras.Model):
        raise UsageError(f"{path}:{function_name}() returned {type(model).__name__}, not a Keras model. "
                         "Return a keras.Model (Sequential, functional or subclassed).")
    return model


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


def _compile_for_labels(model, y: np.ndarray, learning_rate: float | None) -> None:
    """Compile a model given uncompiled, with the loss its labels call for, and say so."""
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
    log.info(f"compiled the model: {loss_name}{'' if probabilities else ' (from logits)'} ({reason}), "
             f"Adam {rate:g}, metrics {metrics}")
