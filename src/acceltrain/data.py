"""Validation and preparation of training inputs, shared by both backends.

Everything here works on numpy arrays (or nests of them) and imports no framework. Each check raises
UsageError naming the value and the fix, so bad input ends before anything is trained or written.
"""

import itertools
from dataclasses import dataclass

import numpy as np

from acceltrain.errors import UsageError, positive_int

# Keras's own batch where fit, evaluate or predict is given none (batch_size=None; Keras 3.15.1's data adapters).
KERAS_DEFAULT_BATCH_SIZE = 32


def keras_batch(batch_size: int | None) -> int:
    """The batch Keras trains on for `batch_size`: the one given, else Keras's default. The one place it is resolved."""
    return batch_size or KERAS_DEFAULT_BATCH_SIZE


def is_arrays(x) -> bool:
    """True for a numpy array or a list/tuple/dict of them (what Keras's array adapter takes)."""
    if isinstance(x, np.ndarray):
        return True
    if isinstance(x, dict):
        return bool(x) and all(is_arrays(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return bool(x) and all(is_arrays(v) for v in x)
    return False


def _map(fn, x):
    if isinstance(x, dict):
        return {k: _map(fn, v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_map(fn, v) for v in x)
    return fn(x)


def leaves(x) -> list:
    """The arrays of a nest (dict, list, tuple) in order; a single array is its own one leaf."""
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in leaves(v)]
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in leaves(v)]
    return [x]


def num_samples(x) -> int:
    return len(leaves(x)[0])


# --- Checks -----------------------------------------------------------------------------------

def nearest_valid_batch_sizes(batch_size: int, num_replicas: int) -> list[int]:
    """The multiples of num_replicas nearest to batch_size, below and above."""
    below = (batch_size // num_replicas) * num_replicas
    above = below + num_replicas
    return [size for size in (below, above) if size > 0]


def check_batch_size(batch_size, num_replicas: int) -> None:
    """The global batch must be a positive integer that splits evenly over the replicas."""
    positive_int(batch_size, "batch_size", ": the global batch")
    if batch_size % num_replicas:
        _raise_indivisible(f"Received batch_size={batch_size}, which does", batch_size, num_replicas,
                           "Use a multiple")


def _raise_indivisible(subject: str, batch: int, num_replicas: int, fix: str):
    valid = " or ".join(str(size) for size in nearest_valid_batch_sizes(batch, num_replicas))
    raise UsageError(
        f"{subject} not divide over {num_replicas} replicas (each replica takes an equal slice of the global "
        f"batch). {fix} of {num_replicas}: the nearest are {valid}."
    )


def check_arrays(x, y=None, *, name: str = "x") -> None:
    """Same number of samples everywhere, and no NaN or inf in floating-point inputs."""
    arrays = leaves(x) + ([] if y is None else leaves(y))
    lengths = {len(leaf) for leaf in arrays}
    if len(lengths) > 1:
        x_len = [len(leaf) for leaf in leaves(x)]
        y_len = [] if y is None else [len(leaf) for leaf in leaves(y)]
        raise UsageError(
            f"{name} and its labels have different numbers of samples: {name} has {x_len}, labels have "
            f"{y_len}. Each input and label array needs one row per sample."
        )
    for label, arrays in ((name, leaves(x)), (f"labels of {name}", [] if y is None else leaves(y))):
        for array in arrays:
            if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
                bad = int(np.size(array) - np.isfinite(array).sum())
                raise UsageError(
                    f"{label} holds {bad} NaN or infinite value(s). Training on them gives a NaN loss: "
                    "clean or impute them before training."
                )


def check_class_labels(y, num_classes: int | None, *, name: str = "y") -> None:
    """Integer class labels must lie in [0, num_classes): Keras on JAX would train on garbage silently."""
    if not isinstance(y, np.ndarray) or not np.issubdtype(y.dtype, np.integer) or (num_classes or 0) < 2:
        return
    if y.ndim > 1 and y.shape[-1] != 1:
        return  # not class indices (one-hot or multi-label)
    low, high = int(y.min()), int(y.max())
    if low < 0 or high >= num_classes:
        raise UsageError(
            f"{name} holds class labels from {low} to {high}, but the model's output has {num_classes} "
            f"classes (0 to {num_classes - 1}). Give the last layer one unit per class, or fix the labels."
        )


# --- Preparation ------------------------------------------------------------------------------

def as_float32(x):
    """float64 arrays cast once to float32 (accelerators compute in 32 bits or fewer; Keras would
    otherwise cast every batch, every step). Other dtypes pass as they are."""
    return _map(lambda a: a.astype(np.float32) if a.dtype == np.float64 else a, x)


def repeat(x, times: int):
    """The whole of an array (or a nest of them) `times` over, one copy after another."""
    return None if x is None else _map(lambda a: np.concatenate([a] * times), x)


def process_share(x, process_index: int, num_processes: int):
    """This process's share of the samples in a multi-process job: every num_processes-th, from its index.

    Keras joins the processes' local batches into one global batch, so global batch k holds exactly the
    samples of batch k of the whole array (in another order within it), whatever the process count.
    """
    if x is None or num_processes == 1:
        return x
    return _map(lambda a: a[process_index::num_processes], x)


def take(x, indices):
    """The samples at `indices` (an index array, in its order, or a slice), from an array or a nest of them."""
    return None if x is None else _map(lambda a: a[indices], x)


def split_validation(x, y, sample_weight, fraction: float):
    """Keras's `validation_split`, made here: ((x, y, sample_weight) to train on, (x, y) to validate on),
    the validation part the last `fraction` of the samples, before any shuffle, as Keras cuts it."""
    cut = int(num_samples(x) * (1 - fraction))
    return (take(x, slice(0, cut)), take(y, slice(0, cut)), take(sample_weight, slice(0, cut))), \
        (take(x, slice(cut, None)), take(y, slice(cut, None)))


# --- tf.data datasets -------------------------------------------------------------------------
# Recognised and handled through the dataset's own methods, so this module still imports no
# framework (on JAX, Keras reads tf.data too). A dataset brings its own global batch.

def is_dataset(x) -> bool:
    """True for a tf.data.Dataset."""
    return hasattr(x, "element_spec") and hasattr(x, "rebatch")


def _batch_dims(dataset) -> list:
    """The leading dimension of each part of an element (None where it varies); [] if one is a scalar."""
    dims = []
    for spec in leaves(dataset.element_spec):
        if spec.shape.rank is not None and spec.shape.rank == 0:
            return []
        dims.append(spec.shape[0] if spec.shape.rank is not None else None)
    return dims


def dataset_batch_size(dataset, *, name: str = "x") -> int:
    """The global batch of a batched dataset: its static batch dimension, else its one batch op's size where its
    length is known, else the size of its first batch.

    Reading the first batch runs the pipeline up to it once (a shuffle fills its buffer).
    """
    dims = _batch_dims(dataset)
    known = {dim for dim in dims if dim is not None}
    if not dims or len(known) > 1:
        raise UsageError(
            f"{name} is a tf.data.Dataset of single samples (element_spec: {dataset.element_spec}). "
            "Batch it with the global batch, e.g. dataset.batch(1024): the batch is split over the replicas."
        )
    if known:
        return known.pop()
    empty = UsageError(f"{name} is an empty tf.data.Dataset: there is nothing to train or evaluate on.")
    count = int(dataset.cardinality())
    if count == 0:
        raise empty
    batch = _graph(dataset).batch_size if count != -2 else None  # -2: unknown (a filter may have left none)
    if batch:
        return batch  # its one batch op's: nothing read (a process reading its share at the source reads no more)
    for element in dataset.take(1):
        return int(leaves(element)[0].shape[0])
    raise empty


def check_dataset(dataset, batch_size, num_replicas: int, *, name: str = "x") -> int:
    """The dataset is batched, by a batch that splits evenly over the replicas. Returns that batch."""
    batch = dataset_batch_size(dataset, name=name)
    if batch_size is not None and batch_size != batch:
        raise UsageError(
            f"Received batch_size={batch_size} with {name}, a dataset batched by {batch}. A dataset brings its "
            f"own batch: leave batch_size out, or batch the dataset by {batch_size} (dataset.rebatch({batch_size}))."
        )
    if batch % num_replicas:
        _raise_indivisible(f"{name} is batched by {batch}, which does", batch, num_replicas, "Batch it by a multiple")
    return batch


def has_static_batch(dataset) -> bool:
    """Every batch has the same, known size (batched with drop_remainder=True, or rebatched so)."""
    dims = _batch_dims(dataset)
    return bool(dims) and None not in dims


def drop_remainder(dataset, batch_size: int):
    """The dataset with every batch full, so the batch dimension is static (XLA on TPU compiles one shape)
    and each batch splits evenly. Returns (dataset, changed); at most batch_size - 1 samples a pass go."""
    if has_static_batch(dataset):
        return dataset, False
    return dataset.rebatch(batch_size, drop_remainder=True), True


def num_batches(dataset) -> int | None:
    """Batches in one pass over the dataset, where TensorFlow knows it without reading the data."""
    count = int(dataset.cardinality())
    return count if count >= 0 else None


def dataset_to_arrays(dataset, *, name: str = "x"):
    """Every batch of a finite (x, y) or x-only dataset, joined into numpy arrays. Returns (x, y or None)."""
    batches = list(dataset.as_numpy_iterator())
    if not batches:
        raise UsageError(f"{name} is an empty tf.data.Dataset: there is nothing to evaluate.")
    first = batches[0]
    if isinstance(first, tuple) and len(first) == 2:
        return _join([b[0] for b in batches]), _join([b[1] for b in batches])
    if isinstance(first, tuple) and len(first) != 1:
        raise UsageError(
            f"{name} yields {len(first)}-part elements; across several replicas on this backend a dataset is "
            "evaluated from memory, which takes (x, y) or x. Pass the arrays (x, y, sample_weight=...) instead."
        )
    return _join([b[0] if isinstance(b, tuple) else b for b in batches]), None


def first_batches(x, y, batch_size: int | None, count: int):
    """The first `count` batches a fit would train on, in order, as (x, y) of numpy arrays (y None where there is
    none; float64 cast to float32), from the start again where there are fewer; and the batch. From arrays at
    `batch_size`, or the batches of a tf.data or grain dataset (its own batch); fewer samples than a batch are one batch of
    them all, as Keras trains them. None for other inputs (a generator, a PyDataset: reading them would use up the
    batches fit is about to read) and for no samples (fit says what is wrong with them)."""
    if is_arrays(x):
        samples = num_samples(x)
        if samples == 0:
            return None
        batch = min(keras_batch(batch_size), samples)
        available = samples // batch
        cuts = [slice(i % available * batch, (i % available + 1) * batch) for i in range(count)]
        return [(as_float32(take(x, cut)), take(y, cut)) for cut in cuts], batch
    if is_dataset(x):
        elements, kind = x.take(count).as_numpy_iterator(), "tf.data.Dataset"
    elif is_grain(x) and type(x).__name__ != "DataLoader" and hasattr(x, "__iter__"):
        # A grain MapDataset/IterDataset (keras_hub's fit makes one of arrays where grain is installed): each iter()
        # starts again from the first batch, so reading ahead uses up none of fit's. A DataLoader is read once only.
        elements, kind = itertools.islice(iter(x), count), "grain dataset"
    else:
        return None
    batches = []
    for element in elements:
        xs, ys = (element[0], element[1] if len(element) > 1 else None) if isinstance(element, tuple) else (element,
                                                                                                           None)
        batches.append((as_float32(xs), ys))
    if not batches:
        raise UsageError(f"x is an empty {kind}: there is nothing to train on.")
    return [batches[i % len(batches)] for i in range(count)], len(leaves(batches[0][0])[0])


def _join(batches):
    first = batches[0]
    if isinstance(first, dict):
        return {key: _join([b[key] for b in batches]) for key in first}
    if isinstance(first, (list, tuple)):
        return type(first)(_join([b[i] for b in batches]) for i in range(len(first)))
    return np.concatenate(batches)


# --- Streams: every input that is not arrays (a tf.data dataset, a keras.utils.PyDataset, a generator, Grain's
# loaders). Handled batch by batch with the arrays' rules (inputs.py): a batch made to divide over the replicas,
# and in a job of several processes each process's rows of it. Recognised by their classes' names, as Keras does.

def is_tensor(x) -> bool:
    """A framework's array (a tf.Tensor, a jax.Array) that numpy reads into numbers: not a numpy array, not a dataset,
    not a tensor of strings (tf.string: numpy reads it as an array of Python objects, which Keras refuses, "Invalid
    dtype: object", where it takes the tensor itself; issue 45's FeatureSpace model called on a dict of raw values)."""
    return (not isinstance(x, np.ndarray) and hasattr(x, "__array__") and hasattr(x, "shape")
            and hasattr(x, "dtype") and not is_dataset(x) and getattr(x.dtype, "name", None) != "string")


def tensors_as_numpy(x):
    """A nest whose tensors are numpy arrays (np.asarray); anything else in it as it is."""
    if isinstance(x, dict):
        return {k: tensors_as_numpy(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(tensors_as_numpy(v) for v in x)
    return np.asarray(x) if is_tensor(x) else x


def has_tensors(x) -> bool:
    return any(is_tensor(leaf) for leaf in leaves(x)) if isinstance(x, (dict, list, tuple)) else is_tensor(x)


def _class_names(x) -> list:
    return [(parent.__name__, str(parent.__module__)) for parent in type(x).__mro__]


def is_py_dataset(x) -> bool:
    return any(name == "PyDataset" and "keras" in module for name, module in _class_names(x))


def is_grain(x) -> bool:
    """Grain's MapDataset, IterDataset or DataLoader (what Keras's grain adapter takes)."""
    return any(name in ("MapDataset", "IterDataset", "DataLoader") and "grain" in module
               for name, module in _class_names(x))


def is_generator(x) -> bool:
    """A Python generator or iterator of batches (not a dataset, a PyDataset or a Grain loader)."""
    return hasattr(x, "__next__") and hasattr(x, "__iter__") and not (is_dataset(x) or is_grain(x))


def batch_rows(element) -> int:
    """The rows of one batch (its first array's leading dimension)."""
    return int(np.shape(leaves(element)[0])[0])


def batch_part(element, num_replicas: int, process_index: int = 0, num_processes: int = 1):
    """One batch (a nest of arrays) by the arrays' rules: its rows cut to a multiple of `num_replicas` (the global
    replicas: its last few left out), then this process's rows of it, every num_processes-th from its index
    (process_share). None where nothing is left (a batch of fewer rows than replicas)."""
    rows = batch_rows(element)
    keep = rows - rows % num_replicas
    if keep == 0:
        return None
    return _map(lambda a: np.asarray(a)[:keep][process_index::num_processes], element)


def dataset_part(dataset, num_replicas: int, process_index: int = 0, num_processes: int = 1):
    """`batch_part` on every batch of a tf.data dataset, in its graph (the batches it leaves empty skipped)."""
    import tensorflow as tf  # a tf.data dataset exists: TensorFlow is loaded already

    def part(*element):
        element = element[0] if len(element) == 1 else element
        rows = tf.shape(tf.nest.flatten(element)[0])[0]
        keep = rows - rows % num_replicas
        return tf.nest.map_structure(lambda t: t[:keep][process_index::num_processes], element)

    def not_empty(*element):
        return tf.shape(tf.nest.flatten(element)[0])[0] > 0

    parted = dataset.map(part, deterministic=True)
    # whole batches of a known size (checked to divide) stay whole: no filter, so the dataset keeps its length
    return parted if has_static_batch(dataset) else parted.filter(not_empty)


# --- A tf.data pipeline read at its source ------------------------------------------------------------------------
# Each process of a job reads its own share of the samples where the pipeline starts: a shard put after the dataset's
# source, not at its end (tf.data's own dataset.shard() at the end, like its DATA auto-shard policy, runs the whole
# pipeline in every process and drops the rest). Done on the dataset's graph, as tf.data's auto-shard rewrite is.

# The sources whose length the graph holds (from_tensor_slices, range), and the attribute naming their types.
_SOURCES = {"TensorSliceDataset": "Toutput_types", "RangeDataset": "output_types"}
_BATCHES = ("BatchDatasetV2", "ParallelBatchDataset", "PaddedBatchDatasetV2")  # input 1: the batch size


@dataclass
class _Graph:
    """A dataset's graph and what the share needs of it: its sources, its one batch op and that op's batch."""

    graph_def: object
    sources: list
    batch_node: object = None
    batch_size: int | None = None
    drop_remainder: bool = False


def _graph(dataset) -> _Graph:
    """Relies on: tf.data.Dataset._as_serialized_graph (TensorFlow's own; tf.distribute's auto-shard and the tf.data
    service serialize a dataset with it), and its nodes' ops and attributes as TensorFlow 2.21 writes them."""
    import tensorflow as tf

    policy = tf.data.experimental.ExternalStatePolicy.WARN  # a py_function's state stays in this process
    try:
        graph_def = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph(external_state_policy=policy).numpy())
    except (ValueError, tf.errors.OpError):  # not serializable (over protobuf's 2 GB? not tried here): no share
        return _Graph(None, [])
    nodes = {node.name: node for node in graph_def.node}
    datasets = {node.name for node in graph_def.node if "Dataset" in node.op}
    sources = [node for node in graph_def.node
               if node.name in datasets and not any(name.split(":")[0] in datasets for name in node.input)]
    batches = [node for node in graph_def.node if node.op in _BATCHES or node.op.startswith("Rebatch")]
    found = _Graph(graph_def, sources)
    if len(batches) == 1 and batches[0].op in _BATCHES and nodes[batches[0].input[1]].op == "Const":
        found.batch_node = batches[0]
        found.batch_size = int(tf.make_ndarray(nodes[batches[0].input[1]].attr["value"].tensor))
        last = nodes[batches[0].input[-1]]  # drop_remainder, each batch op's last input
        found.drop_remainder = last.op != "Const" or bool(tf.make_ndarray(last.attr["value"].tensor))
    return found


def source_share(dataset, process_index: int, num_processes: int, whole: bool = False):
    """This process's share of a batched tf.data pipeline, read at its source: every num_processes-th sample of each
    source (from its index; the last length % num_processes left out, so every process has as many), batched by
    batch / num_processes where the pipeline batched by the global batch. So process p's pipeline reads samples p,
    p + P, ... only, and global batch k (each process's batch k) holds, with no shuffle, the pipeline's batch k.

    None where no such share can be taken: a source other than from_tensor_slices or range (a generator, files), other
    than one batch op of a known size not dividing by the processes, a static batch (drop_remainder=True: the map
    functions after it were traced for that size), or a length per process TensorFlow does not know (a filter: the
    processes could take different numbers of steps). `whole` (evaluate, predict: read into memory, then joined): no
    sample left out, process p reading ceil((length - p) / num_processes) of them; None where a source has fewer
    samples than processes (a process would read none)."""
    import tensorflow as tf

    found = _graph(dataset)
    batch = found.batch_size
    if (not found.sources or any(node.op not in _SOURCES for node in found.sources) or not batch
            or batch % num_processes or found.drop_remainder or has_static_batch(dataset)):
        return None
    graph_def, nodes = found.graph_def, {node.name: node for node in found.graph_def.node}

    def const(name: str, value: int) -> str:
        node = graph_def.node.add(name=name, op="Const")
        node.attr["dtype"].type = tf.int64.as_datatype_enum
        node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value, tf.int64))
        return name

    found.batch_node.input[1] = const("acceltrain/batch", batch // num_processes)
    for source in found.sources:
        consts = [nodes[name].attr["value"].tensor for name in source.input]
        # A slice's length from its first tensor's shape: its values are not read (tf.make_ndarray cannot read
        # strings packed in tensor_content: "cannot create an OBJECT array from memory buffer", issue 45's text job).
        length = (consts[0].tensor_shape.dim[0].size if source.op == "TensorSliceDataset"
                  else len(range(*(int(tf.make_ndarray(const)) for const in consts))))
        if whole and length < num_processes:
            return None
        readers = [node for node in graph_def.node if source.name in node.input]
        take = graph_def.node.add(name=f"{source.name}/acceltrain/take", op="TakeDataset", input=[
            source.name, const(f"{source.name}/acceltrain/count", length if whole else length - length % num_processes)])
        shard = graph_def.node.add(name=f"{source.name}/acceltrain/shard", op="ShardDataset", input=[
            take.name, const(f"{source.name}/acceltrain/shards", num_processes),
            const(f"{source.name}/acceltrain/index", process_index)])
        for node in (take, shard):
            node.attr["output_types"].CopyFrom(source.attr[_SOURCES[source.op]])
            node.attr["output_shapes"].CopyFrom(source.attr["output_shapes"])
        shard.attr["require_non_empty"].b = False
        for reader in readers:
            reader.input[:] = [shard.name if name == source.name else name for name in reader.input]
    variant = tf.raw_ops.DatasetFromGraph(graph_def=graph_def.SerializeToString())
    shared = tf.data.experimental.from_variant(variant, structure=dataset.element_spec)
    if int(shared.cardinality()) == -2:  # tf.data.UNKNOWN_CARDINALITY
        return None
    shared._acceltrain_pipeline = dataset  # its py_functions stay registered as long as the share is read
    return shared


def stream_batches(x, steps: int | None = None):
    """The batches of a finite stream, in order (at most `steps`): a dataset's, a PyDataset's by index, a
    generator's or a Grain loader's, each a nest of numpy arrays."""
    if is_dataset(x):
        source = x.take(steps) if steps else x
        if not steps and int(source.cardinality()) == -1:  # tf.data.INFINITE_CARDINALITY
            raise UsageError("Received an infinite tf.data.Dataset (repeat()) without steps: it cannot be read "
                             "whole. Pass steps= (evaluate, predict) or validation_steps= (fit).")
        batches = source.as_numpy_iterator()
    elif is_py_dataset(x):
        count = x.num_batches if steps is None else min(steps, x.num_batches or steps)
        if count is None:
            raise UsageError("Received a PyDataset of unknown length without steps: pass steps=.")
        batches = (x[i] for i in range(count))
    else:
        batches = iter(x)
    found = []
    for batch in batches:
        found.append(tensors_as_numpy(batch))
        if steps and len(found) == steps:
            break
    return found


def batches_to_arrays(batches, *, name: str = "x"):
    """Batches (x, y, sample_weight), (x, y), (x,) or x joined into numpy arrays: (x, y, sample_weight)."""
    if not batches:
        raise UsageError(f"{name} yielded no batches: there is nothing to evaluate or predict on.")
    first = batches[0]
    if not isinstance(first, tuple):
        return _join(batches), None, None
    parts = [_join([b[i] for b in batches]) if first[i] is not None else None for i in range(len(first))]
    return tuple((parts + [None, None, None])[:3])
