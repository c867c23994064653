"""One input path: what Keras is called with, for Runtime.fit/evaluate/predict and `acceltrain run` alike.

    prepared = inputs.prepare_fit(runtime.split, x, y, batch_size=1024, classes=inputs.classes_of(model))
    model.fit(*prepared.local(), batch_size=prepared.local_batch_size, ...)

Each prepare_* takes a Split (the runtime's replicas and processes: `runtime.split`), checks and reshapes the inputs,
and returns a small dataclass; printing is the caller's (`notes`), so a script's guard can say each thing once. The rules:
- fit: the last few samples left out so the final batch divides over the replicas;
- evaluate: the whole set repeated k times instead (every sample counts k times: metrics unchanged);
- predict: the set padded with its own first samples, and the outputs cut back to it;
- in a job of several processes, each feeds its own share (every num_processes-th sample) and batches
  `global batch / num_processes` of it: Keras joins the shares into the global batch;
- a stream (a tf.data dataset, a PyDataset, a generator, a Grain loader) takes the same rules batch by batch, each
  process reading only its share (streams.py); a tensor is read into numpy.
An input's kind is asked in one place, kinds.kind_of; each kind's own rules (its batch, share, cut, whole read and
resume position) are in its module: arrays.py, tf_data.py, py_dataset.py, grain_loaders.py.
numpy only: no framework is imported here.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from acceltrain.errors import UsageError
from acceltrain.inputs import arrays, kinds, streams, tf_data
from acceltrain.inputs.kinds import ARRAYS, GENERATOR, GRAIN, PY_DATASET, TF_DATA, kind_of


@dataclass(frozen=True)
class Split:
    """What the input path reads of a runtime: how a global batch is split (its replicas, the job's processes and this
    one's index), the platform and whether it compiles one shape, and the backend's two facts about batches (whether
    it splits an uneven batch itself; how the processes' shares are joined). Runtime.split gives the one in force."""

    num_replicas: int = 1
    num_processes: int = 1
    process_index: int = 0
    platform: str = "cpu"
    splits_uneven_batches: bool = False
    join_shares: object = None  # (local arrays, each row's place) → the whole set in every process
    static_shapes: bool = False  # the platform compiles one shape: every batch full (hardware.kind(...).STATIC_SHAPES)


# --- What the model says about its classes ------------------------------------------------------


@dataclass(frozen=True)
class Classes:
    """The facts of a compiled model the checks need: its loss's name and its number of outputs."""

    loss_name: str | None = None
    output_units: int | None = None

    @property
    def num_classes(self) -> int | None:
        """The number of classes of a single-output model trained with a cross-entropy over classes."""
        if "categorical_crossentropy" not in (self.loss_name or "") or not self.output_units:
            return None
        return self.output_units if self.output_units > 1 else None


def classes_of(model) -> Classes:
    """The loss name (a string given to compile, or the loss object's name) and the last output size."""
    loss = getattr(model, "loss", None)
    loss_name = loss if isinstance(loss, str) else getattr(loss, "name", None) or getattr(loss, "__name__", None)
    try:
        shape = model.output_shape
    except (AttributeError, ValueError, RuntimeError):
        shape = None
    units = shape[-1] if isinstance(shape, tuple) and shape and isinstance(shape[-1], int) else None
    return Classes(loss_name, units)


# --- The prepared calls -------------------------------------------------------------------------


@dataclass
class Prepared:
    """Inputs ready for Keras: `x, y, sample_weight` are the whole (global) prepared set; `local()` is this
    process's share of them, `local_batch_size` the batch Keras is given here (None: Keras's default)."""

    x: object
    y: object = None
    sample_weight: object = None
    batch_size: int | None = None  # the global batch; None for a dataset (it brings its own) or Keras's default
    local_batch_size: int | None = None
    process_index: int = 0
    num_processes: int = 1
    notes: list = field(default_factory=list)  # (key, message): what the caller tells the user, once per key

    def share(self, values):
        """This process's share of each array of a tuple (of a single array), whole with one process."""
        if isinstance(values, tuple):
            return tuple(self.share(a) for a in values)
        if streams.is_stream(values):
            return values  # a stream is shared batch by batch (share_stream)
        return arrays.process_share(values, self.process_index, self.num_processes)

    def local(self):
        """(x, y, sample_weight): this process's share, to hand Keras."""
        return self.share((self.x, self.y, self.sample_weight))


@dataclass
class Fit(Prepared):
    steps_per_epoch: int | None = None  # of the global data, where known
    left_out: int = 0  # arrays kept whole (trim=False): the samples each epoch leaves out at the end of its order
    num_replicas: int = 1
    validation_data: object = None  # already this process's share
    validation_batch_size: int | None = None  # per process; None: Keras's default
    is_dataset: bool = False
    shuffles_itself: bool = False  # a PyDataset read by share shuffles its groups of batches: Keras's shuffle off
    # what a backend placed on the devices for this fit, kept for its every epoch (backends/jax/resident.py)
    on_devices: dict = field(default_factory=dict, repr=False, compare=False)

    def epoch(self, order, first_step: int = 0) -> dict:
        """Keras's fit arguments for one epoch (x, y, sample_weight, batch_size), this process's share: the samples
        in `order` (a permutation of all of them) less its last `left_out`, from global batch `first_step` on (a
        resumed epoch). The weights follow their samples."""
        order = order[:len(order) - self.left_out][first_step * self.batch_size:]
        x, y, weights = self.share(tuple(arrays.take(a, order) for a in (self.x, self.y, self.sample_weight)))
        return {"x": x, "y": y, "sample_weight": weights, "batch_size": self.local_batch_size}

    def epoch_batches(self, order, first_step: int = 0) -> "EpochBatches":
        """The same epoch as `epoch`, batch by batch: each batch gathered only when asked for, so the epoch's order
        is never copied whole (the batches are the same arrays `epoch` gives Keras, cut at local_batch_size)."""
        return EpochBatches(self, order[:len(order) - self.left_out][first_step * self.batch_size:])


@dataclass
class EpochBatches:
    """One epoch of a Fit's arrays in `order` (global sample indices, from the epoch's first step to run): `[i]` is
    this process's share of global batch i, as (x, y) or (x, y, sample_weight). A keras.utils.PyDataset wraps it."""

    fit: Fit
    order: np.ndarray

    def __len__(self) -> int:
        return math.ceil(len(self.order) / self.fit.batch_size)

    def local_order(self) -> np.ndarray:
        """This process's rows of the epoch in order, batch after batch: cut at local_batch_size, batch i is `[i]`'s
        rows (every global batch, its last too, holds a multiple of the processes: the arrays' rules)."""
        places = np.arange(len(self.order))
        return self.order[places % self.fit.batch_size % self.fit.num_processes == self.fit.process_index]

    def __getitem__(self, i: int) -> tuple:
        batch = self.fit.batch_size
        indices = self.order[i * batch:(i + 1) * batch][self.fit.process_index::self.fit.num_processes]
        x, y, weights = (arrays.take(a, indices) for a in (self.fit.x, self.fit.y, self.fit.sample_weight))
        return (x, y, weights) if weights is not None else (x, y) if y is not None else (x,)


@dataclass
class Predict(Prepared):
    num_samples: int | None = None  # before padding (None: not arrays): the outputs are cut back to it

    def finish(self, outputs, gathered: bool = False):
        """The outputs of the whole set, in its order, without the padding.

        `gathered`: outputs joined from all processes (global rows of each batch: process 0's local rows,
        then process 1's ...), put back into the order of the samples.
        """
        if gathered and self.num_processes > 1:
            outputs = _map_outputs(lambda a: _interleave(a, self.batch_size, self.num_processes), outputs)
        return _map_outputs(lambda a: a[: self.num_samples], outputs)


def prepare_fit(split, x, y=None, *, batch_size=None, classes: Classes = Classes(), sample_weight=None,
                validation_data=None, validation_split=0.0, validation_batch_size=None, validation_steps=None,
                checked: bool = True, trim: bool = True, shuffle: bool = False) -> Fit:
    """Training inputs split by `split`. `checked` (Runtime.fit): the batch is checked (arrays given none take Keras's
    default, 32, as model.fit does), arrays are
    checked (lengths, NaN/inf, class labels) and float64 cast once; else (a plain script's fit, already
    checked by `checks`) they are only cut and shared. `trim=False` (Runtime.fit with checkpoints) keeps every
    training sample: each epoch leaves out its own `left_out`, after its shuffle (Fit.epoch). `validation_split`
    is made here, once, as Keras makes it (the last fraction, before any shuffle, where no validation_data). A stream
    (a dataset, PyDataset, generator, Grain loader) is taken batch by batch (share_stream); a validation stream, on
    several replicas, is read into memory (its first `validation_steps` batches) and takes the arrays' rules.
    `shuffle`: fit's; where the prepared stream shuffles itself (a PyDataset read by share), `shuffles_itself` says
    so, and the caller passes shuffle=False to Keras."""
    x = kinds.tensors_as_numpy(x)  # a tf.Tensor, a jax.Array: numpy arrays, which take the arrays' rules
    y, sample_weight = kinds.tensors_as_numpy(y), kinds.tensors_as_numpy(sample_weight)
    if checked and kind_of(x) == ARRAYS:  # Runtime.fit's: none given is Keras's default, as model.fit takes it
        batch_size = arrays.checked_batch_size(batch_size, split.num_replicas)
    fit = Fit(x, y, sample_weight, batch_size, validation_batch_size=validation_batch_size,
              num_replicas=split.num_replicas, **_processes(split))
    kind = kind_of(x)
    if kind == TF_DATA:
        _batch_training_dataset(split, fit, checked)
    elif kind in (PY_DATASET, GRAIN):  # a PyDataset's batch: its first's (read once, py_dataset.read)
        fit.steps_per_epoch = len(x) if kind == PY_DATASET else None
        fit.batch_size = streams.stream_batch_size(x, split.process_index, split.num_processes)
        if checked and fit.batch_size is not None:
            arrays.check_batch_size(fit.batch_size, split.num_replicas)
    elif kind == GENERATOR:  # its batch: its first's, read ahead and put back in front
        fit.x, fit.batch_size = streams.peeked(x)
        if checked and fit.batch_size is not None and fit.batch_size % split.num_replicas:  # as a PyDataset's
            arrays.raise_indivisible(f"Received x, a generator whose first batch has {fit.batch_size} rows, which does",
                                     fit.batch_size, split.num_replicas, "Yield batches of a multiple")
    held_out = bool(validation_split) and validation_data is None  # made here, from the training arrays
    if held_out:
        if kind != ARRAYS:
            raise UsageError(f"Received validation_split={validation_split} with x of type {type(x).__name__}: only "
                             "arrays are split by a fraction (Keras refuses it too). Pass validation_data instead.")
        (fit.x, fit.y, fit.sample_weight), validation_data = arrays.split_validation(x, y, sample_weight,
                                                                                   validation_split)
    if streams.is_stream(fit.x) and not (checked and fit.is_dataset):  # Runtime.fit's datasets: _batch_training_dataset
        fit.x = streams.share_stream(split, fit.x, fit.notes, shuffle=shuffle)
        fit.shuffles_itself = shuffle and split.num_processes > 1 and kind_of(fit.x) == PY_DATASET
    if streams.is_stream(validation_data) and (split.num_replicas > 1 or split.num_processes > 1) \
            and not (checked and kind_of(validation_data) == TF_DATA):
        *validation_data, weights = streams.stream_to_arrays(validation_data, validation_steps, "validation_data",
                                                             fit.notes, split)
        validation_data = (*validation_data, weights) if weights is not None else tuple(validation_data)
    if kind_of(fit.x) == ARRAYS:
        _trim_training_arrays(split, fit, classes, checked, trim)
        fit.steps_per_epoch = math.ceil((arrays.num_samples(fit.x) - fit.left_out)
                                        / arrays.keras_batch(batch_size))
    fit.validation_data = _prepare_validation(split, fit, validation_data, classes, checked,
                                              "validation_split's held-out samples" if held_out else "validation_data")
    fit.local_batch_size = None if fit.is_dataset else _local_batch(fit.batch_size, split.num_processes)
    if _is_array_set(fit.validation_data) or split.num_processes > 1:
        # validation_batch_size defaults to batch_size, as in Keras
        fit.validation_batch_size = _local_batch(
            arrays.keras_batch(fit.validation_batch_size or fit.batch_size), split.num_processes,
            always=True)
    return fit


def prepare_evaluate(split, x, y=None, *, batch_size=None, classes: Classes = Classes(), sample_weight=None,
                     checked: bool = True, name: str = "x") -> Prepared:
    """Evaluation inputs split by `split`: every sample counted, none dropped (see module docstring)."""
    x = kinds.tensors_as_numpy(x)  # a tf.Tensor, a jax.Array: numpy arrays, which take the arrays' rules
    y, sample_weight = kinds.tensors_as_numpy(y), kinds.tensors_as_numpy(sample_weight)
    if kind_of(x) == TF_DATA:
        prepared = Prepared(x, y, sample_weight, **_processes(split))
        if checked:
            prepared.x, prepared.batch_size = _eval_dataset(split, x, batch_size, classes, name, prepared.notes)
            if isinstance(prepared.x, tuple):
                prepared.x, prepared.y = prepared.x
                prepared.local_batch_size = _local_batch(prepared.batch_size, split.num_processes)
        return prepared
    if checked:  # Runtime.evaluate's: none given is Keras's default, as model.evaluate takes it (predict's too)
        batch_size = arrays.checked_batch_size(batch_size, split.num_replicas)
    prepared = Prepared(x, y, sample_weight, batch_size, **_processes(split))
    if kind_of(x) == ARRAYS:
        prepared.x, prepared.y, prepared.sample_weight = _repeat_eval_arrays(
            split, (x, y, sample_weight), classes, checked, name, prepared.notes)
    prepared.local_batch_size = _local_batch(batch_size, split.num_processes)
    return prepared


def prepare_predict(split, x, *, batch_size=None, checked: bool = True) -> Predict:
    """Prediction inputs split by `split`: padded with the set's own first samples so every batch divides over
    the replicas (in a job of several processes: so every batch is full), cut back by `Predict.finish`. A stream on
    several replicas is read into memory first (stream_to_arrays). `checked` (Runtime.predict): a batch that does not
    divide is refused; a script's was decided at run's door (on one device, or TensorFlow's uneven split, warned)."""
    x = kinds.tensors_as_numpy(x)  # a tf.Tensor, a jax.Array: numpy arrays, which take the arrays' rules
    notes = []
    if streams.is_stream(x) and (split.num_replicas > 1 or split.num_processes > 1):
        x = streams.stream_to_arrays(x, name="x", notes=notes, split=split)[0]
    if checked and batch_size is not None:
        arrays.check_batch_size(batch_size, split.num_replicas)
    predict = Predict(x, batch_size=batch_size, notes=notes, **_processes(split))
    if kind_of(x) != ARRAYS:
        return predict  # a dataset or generator: Keras takes it as it is
    n = predict.num_samples = arrays.num_samples(x)
    if n == 0:
        arrays.raise_empty()
    if split.num_processes > 1:
        # Every process takes the same number of full batches, so the joined outputs interleave regularly.
        predict.batch_size = batch = batch_size or _smallest_multiple(arrays.KERAS_DEFAULT_BATCH_SIZE,
                                                                       split.num_replicas)
        padded = math.ceil(n / batch) * batch
    else:
        padded = math.ceil(n / split.num_replicas) * split.num_replicas
    if padded != n:
        predict.x = arrays.take(x, np.arange(padded) % n)
    predict.local_batch_size = _local_batch(predict.batch_size, split.num_processes)
    return predict


# --- The steps ----------------------------------------------------------------------------------


def global_batch(batch_size: int | None, num_replicas: int, accumulation: int = 1, own: str = "") -> str:
    """How a fit's global batch is cut, said the same way by Runtime.fit and `run`: "global batch 512 = 2 steps × 32 ×
    8 replica(s)". `batch_size`: one step's batch (None: Keras's default); `accumulation`: steps a weight update;
    `own`: the caller's own distribution the fit runs under, named after it (its replicas: its mesh's batch axis)."""
    batch = arrays.keras_batch(batch_size)
    steps = f"{accumulation} steps × " if accumulation > 1 else ""
    under = f" of {own}" if own else ""
    return f"global batch {batch * accumulation} = {steps}{batch // num_replicas} × {num_replicas} replica(s){under}"


def _processes(split) -> dict:
    return {"process_index": split.process_index, "num_processes": split.num_processes}


def _local_batch(batch_size, num_processes: int, always: bool = False):
    """Keras batches each process's share: a global batch B is B / num_processes from each (divisible: a
    multiple of the replicas, checked first). None stays Keras's default with one process."""
    if num_processes == 1 and not always:
        return batch_size
    return arrays.keras_batch(batch_size) // num_processes


def _smallest_multiple(at_least: int, of: int) -> int:
    return math.ceil(at_least / of) * of


def _is_array_set(pair) -> bool:
    return isinstance(pair, tuple) and len(pair) in (2, 3) and kind_of(pair[0]) == ARRAYS


def _trim_training_arrays(split, fit: Fit, classes: Classes, checked: bool, trim: bool) -> None:
    """Leave out the few last samples that would make the final batch indivisible over the replicas."""
    if checked:
        arrays.check_arrays(fit.x, fit.y)
        arrays.check_class_labels(fit.y, classes.num_classes)
        fit.x, fit.y = arrays.as_float32(fit.x), arrays.as_float32(fit.y) if fit.y is not None else None
    n = arrays.num_samples(fit.x)
    keep = n - n % split.num_replicas  # the same as (n % batch) % replicas: the batch is a multiple of them
    if keep == 0 and split.splits_uneven_batches:
        keep = n  # fewer samples than replicas: TensorFlow splits their one short batch itself
    elif keep == 0:  # Runtime.fit's (acceltrain run runs such a fit on one device: decisions.choose_batch_split)
        raise UsageError(f"Received {n} training sample{'s' * (n != 1)} for {split.num_replicas} replicas: no batch of "
                         "them divides over the replicas, so every one would be left out. Pass at least "
                         f"{split.num_replicas} samples, or connect(distribution='none') to train on one device.")
    if not trim:
        fit.left_out = n - keep
        return
    if keep < n:
        fit.x, fit.y, fit.sample_weight = (arrays.take(a, slice(0, keep)) for a in (fit.x, fit.y, fit.sample_weight))
        fit.notes.append(("trimmed", f"left out the last {n - keep} training samples so the final batch divides "
                                     f"over {split.num_replicas} replicas (the same ones every epoch: Keras "
                                     "shuffles the rest)"))


def _batch_training_dataset(split, fit: Fit, checked: bool) -> None:
    """Check the dataset's batch; make every batch full where shapes must be static or split evenly."""
    fit.is_dataset = True
    if not checked:
        return
    fit.batch_size = tf_data.check_dataset(fit.x, fit.batch_size, split.num_replicas)
    fit.steps_per_epoch = tf_data.num_batches(fit.x)
    if split.num_processes > 1:  # this process's share first (read at the source where it can be), then made full
        fit.x = streams.share_stream(split, fit.x, fit.notes, cut=False)
    if split.num_replicas > 1 or split.static_shapes:
        fit.x, changed = tf_data.drop_remainder(fit.x, fit.batch_size // split.num_processes)
        if changed:
            fit.notes.append(("dropped", f"training batches all full ({fit.batch_size}): at most "
                              f"{fit.batch_size - 1} samples at the end of each pass are left out, so every batch "
                              f"divides over {split.num_replicas} replicas"
                              f"{' and has the static shape XLA compiles for' if split.platform == 'tpu' else ''}"))


def _prepare_validation(split, fit: Fit, validation_data, classes, checked, name: str = "validation_data"):
    """Validation data as evaluation sees it (every sample counted), this process's share; `name`: what its notes call
    it (a validation_split's samples are not the script's validation_data)."""
    if kind_of(validation_data) == TF_DATA and checked:  # its own batch, which may differ from training's
        validation_data, validation_batch = _eval_dataset(split, validation_data, None, classes,
                                                          "validation_data", fit.notes)
        if kind_of(validation_data) != TF_DATA:
            fit.validation_batch_size = fit.validation_batch_size or validation_batch
        return validation_data
    if isinstance(validation_data, list) and _is_array_set(tuple(validation_data)):
        validation_data = tuple(validation_data)  # [x, y]: Keras unpacks a list as it does a tuple
    if not _is_array_set(validation_data):
        return validation_data  # None, a dataset or a generator: Keras takes it as it is
    repeated = _repeat_eval_arrays(split, validation_data, classes, checked, name, fit.notes)
    return fit.share(tuple(repeated[: len(validation_data)]))


def _repeat_eval_arrays(split, given, classes: Classes, checked: bool, name: str, notes: list):
    """The whole set k times over so its size divides over the replicas: every sample counts k times, so
    every mean or ratio metric is that of the set itself (nothing dropped). Returns (x, y, sample_weight)."""
    x, y, weights = (*given, None, None)[:3]
    if checked:
        arrays.check_arrays(x, y, name=name)
        arrays.check_class_labels(y, classes.num_classes, name=f"labels of {name}")
        x, y = arrays.as_float32(x), (arrays.as_float32(y) if y is not None else None)
    n, replicas = arrays.num_samples(x), split.num_replicas
    k = replicas // math.gcd(n, replicas)
    if k == 1:
        return x, y, weights
    notes.append(("repeated", f"{name}: each sample counted {k} times so every batch divides over {replicas} "
                              "replicas (metrics unchanged, none dropped)"))
    return arrays.repeat(x, k), arrays.repeat(y, k), arrays.repeat(weights, k)


def _eval_dataset(split, dataset, batch_size, classes, name, notes):
    """Evaluation reads every sample. Returns (the dataset, or (x, y) arrays), and its batch."""
    batch_size = tf_data.check_dataset(dataset, batch_size, split.num_replicas, name=name)
    if tf_data.has_static_batch(dataset):
        notes.append(("static", f"{name} has full batches only (drop_remainder=True?): samples it drops at its end "
                                "are not evaluated. Batch evaluation data without drop_remainder to count every sample."))
    if split.num_replicas == 1 or split.splits_uneven_batches:
        return dataset, batch_size
    # This backend cannot split the last, partial batch over the replicas: evaluate from memory,
    # where every sample is counted equally (see _repeat_eval_arrays).
    if split.num_processes > 1:  # each process reads its share, joined (streams.stream_to_arrays says so)
        x, y, weights = streams.stream_to_arrays(dataset, name=name, notes=notes, split=split)
        if weights is not None:
            tf_data.dataset_to_arrays(dataset.take(1), name=name)  # refuses a 3-part element, as one process does
    else:
        x, y = tf_data.dataset_to_arrays(dataset, name=name)
        notes.append(("in_memory", f"{name}: read into memory ({arrays.num_samples(x)} samples) so its last, partial "
                                   f"batch divides over {split.num_replicas} replicas"))
    x, y, _ = _repeat_eval_arrays(split, (x, y), classes, True, name, notes)
    return (x, y), batch_size


# --- Outputs of a multi-process predict -------------------------------------------------------------


def _interleave(rows: np.ndarray, batch_size: int, num_processes: int) -> np.ndarray:
    """Joined outputs back in sample order. Global batch k holds, from each process p in turn, its local
    batch k: samples k·B + p + P·j (j < B/P) of the set (arrays.process_share). Undo that per batch."""
    per_process = batch_size // num_processes
    shaped = rows.reshape(-1, num_processes, per_process, *rows.shape[1:])
    return np.swapaxes(shaped, 1, 2).reshape(rows.shape)


def _map_outputs(fn, outputs):
    if isinstance(outputs, dict):
        return {key: _map_outputs(fn, value) for key, value in outputs.items()}
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(_map_outputs(fn, value) for value in outputs)
    return fn(np.asarray(outputs))
