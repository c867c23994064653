"""Keras distributions on JAX: the one a runtime makes for "data", "fsdp" or "model" (born sharded, by the fsdp rule
of acceltrain/sharding.py where no LayoutMap names a weight), the mesh → distribution lookup by which a model built
under scope() finds its distribution again at fit time, and the distribution's names and replica count."""

import contextlib
import functools
import weakref

# The mesh axes. fsdp has one, over which both the batch and the weights are cut; model has two.
BATCH_AXIS, MODEL_AXIS = "batch", "model"

# The distributions of the open runtimes, by the JAX mesh their variables live on, each with how many
# open runtimes use it: how a model built under scope() finds its distribution again when plain
# `model.fit` is called outside the scope. Meshes over the same devices are equal, so connect() again
# over the same devices adds nothing; Runtime.close() (release) takes its count back.
_distributions_by_mesh: dict = {}
# Every distribution acceltrain made (a runtime's, a candidate the autopilot weighed): any other in force is the
# caller's own (own_distribution).
_made = weakref.WeakSet()


def make_distribution(kind: str, device_names: tuple[str, ...], *, model_axis: int | None = None, layout_map=None,
                      born_within: int | None = None):
    """A Keras distribution for `kind` over the named devices; None for "none".

    "data": DataParallel; with `born_within` (bytes of training state a device may hold), one whose variables are
    born whole up to that budget and cut by the fsdp rule past it, until the first fit weighs the model (the rule:
    sharding.born_cut). "fsdp" and "model": weights cut over devices (see make_sharded_distribution);
    `model_axis` and `layout_map` are theirs.
    """
    if kind == "none":
        return None
    if kind == "data" and born_within is not None:
        distribution = _born_within_budget()(_one_axis_mesh(device_names), born_within)
    else:
        distribution = candidate_distribution(kind, device_names, model_axis=model_axis, layout_map=layout_map)
    _made.add(distribution)
    mesh = distribution.device_mesh.backend_mesh
    _, opened = _distributions_by_mesh.get(mesh, (None, 0))
    _distributions_by_mesh[mesh] = (distribution, opened + 1)
    return distribution


def candidate_distribution(kind: str, device_names: tuple[str, ...], *, model_axis: int | None = None,
                           layout_map=None):
    """The distribution make_distribution makes for `kind` ("data", "fsdp", "model"), not yet any runtime's: what
    the autopilot weighs a model under before it chooses (layout/autopilot.py)."""
    import keras

    if kind == "data":
        distribution = keras.distribution.DataParallel(devices=list(device_names))
        _made.add(distribution)
        return distribution
    return make_sharded_distribution(kind, device_names, model_axis, layout_map)


def _one_axis_mesh(device_names):
    import keras

    return keras.distribution.DeviceMesh((len(device_names),), [BATCH_AXIS], list(device_names))


@functools.cache
def _born_within_budget():
    """The class, made on first use: Keras is imported only after connect()."""
    import keras

    from acceltrain import sharding

    class BornWithinBudget(keras.distribution.ModelParallel):
        """Data parallel (a 1-D mesh, every device a slice of each batch) for the models of a script under 'auto'
        with a device memory, whose size nobody knows until their first fit: each variable is born whole while the
        training state a device holds stays within `budget`, and cut by the fsdp rule past it (sharding.born_cut),
        so building never needs more than the budget of whole variables on a device. The first fit weighs the
        model and moves each variable to its chosen layout (relayout), then `weighed()` starts the count again."""

        acceltrain_name = "DataParallel"

        def __init__(self, mesh, budget: int):
            super().__init__(layout_map=keras.distribution.LayoutMap(mesh), batch_dim_name=BATCH_AXIS)
            self.budget = budget
            self.held = 0  # training state bytes a device holds of the variables born since the last first fit
            self.born_cut = 0  # how many of them were born cut

        def get_variable_layout(self, variable):
            shape = tuple(variable.shape)
            size = self.device_mesh.shape[0]
            cut, self.held = sharding.born_cut(shape, str(variable.dtype), variable.trainable, self.held, self.budget,
                                               size)
            self.born_cut += cut
            spec = sharding.fsdp_spec(shape, size, BATCH_AXIS) if cut else (None,) * len(shape)
            return keras.distribution.TensorLayout(spec, self.device_mesh)

    return BornWithinBudget


def weighed(distribution) -> int:
    """A model's first fit has weighed it: the variables born under `distribution` since are counted afresh.
    Returns how many had been born cut."""
    cut = getattr(distribution, "born_cut", 0)
    if hasattr(distribution, "held"):
        distribution.held = distribution.born_cut = 0
    return cut


def release(distribution) -> None:
    """The runtime of `distribution` is closed (or has swapped it for another): forget it."""
    if distribution is None:
        return
    mesh = distribution.device_mesh.backend_mesh
    current, opened = _distributions_by_mesh.get(mesh, (None, 0))
    if opened > 1:
        _distributions_by_mesh[mesh] = (current, opened - 1)
    else:
        _distributions_by_mesh.pop(mesh, None)


def distribution_name(distribution) -> str:
    if distribution is None:
        return "none"
    return getattr(distribution, "acceltrain_name", type(distribution).__name__)


def num_replicas(distribution) -> int:
    """How many slices each global batch is cut into: the size of the mesh's batch axis."""
    if distribution is None:
        return 1
    mesh = distribution.device_mesh
    return mesh.shape[mesh.axis_names.index(distribution.batch_dim_name)]


@contextlib.contextmanager
def scope(distribution, keras_only: bool = False):
    """Models built inside have their variables placed by `distribution`; the previous one is restored. `keras_only`
    changes nothing here: a Keras distribution places Keras's own objects alone."""
    if distribution is None:
        yield
        return
    with distribution.scope():  # Keras restores the previous distribution in a finally
        yield


def own_distribution(model=None):
    """The Keras distribution in force that no open runtime made: a script's own (keras.distribution.set_distribution,
    or its scope: a ModelParallel over a keras_hub layout map, a DataParallel of its own), or None. A call under it
    runs under it, as it does plainly; what is said of the call names it, with its mesh's batch split. Keras on JAX
    reads the distribution from global state at each call, whatever `model` was made under."""
    import keras

    current = keras.distribution.distribution()
    return None if current is None or current in _made else current


def mesh_words(distribution) -> str:
    """'mesh batch 1 × model 4': the distribution's mesh, axis by axis."""
    mesh = distribution.device_mesh
    return "mesh " + " × ".join(f"{name} {size}" for name, size in zip(mesh.axis_names, mesh.shape))


def distribution_of(model):
    """The distribution of an open runtime that `model`'s variables are placed by, if any."""
    for variable in model.variables:
        mesh = getattr(getattr(variable.value, "sharding", None), "mesh", None)
        return _distributions_by_mesh.get(mesh, (None, 0))[0]
    return None


# --- Sharding: weights cut over devices (fsdp, model) ---------------------------------------------

def make_sharded_distribution(kind: str, device_names: tuple[str, ...], model_axis: int | None = None,
                              layout_map=None):
    """A keras.distribution.ModelParallel whose weights are laid out when each is created (born sharded).

    "fsdp": a 1-D mesh; every weight of two or more dims is cut along one axis by the fsdp rule
    (acceltrain.sharding), and each device takes its slice of every batch.
    "model": a 2-D (batch x model) mesh of `model_axis` columns; the same rule on the model axis, the
    batch split over the batch axis.
    `layout_map`: a keras.distribution.LayoutMap (its own mesh, used as is), or a function of a
    DeviceMesh returning one (keras_hub's `Backbone.get_layout_map`); its keys win over the rule.
    """
    import keras

    from acceltrain import sharding

    mesh = getattr(layout_map, "device_mesh", None)
    if mesh is None:
        devices = list(device_names)
        if kind == "fsdp":
            mesh = keras.distribution.DeviceMesh((len(devices),), [BATCH_AXIS], devices)
        else:
            columns = model_axis or sharding.model_axis_size(len(devices))
            mesh = keras.distribution.DeviceMesh((len(devices) // columns, columns), [BATCH_AXIS, MODEL_AXIS],
                                                 devices)
    if callable(layout_map) and not isinstance(layout_map, keras.distribution.LayoutMap):
        layout_map = layout_map(mesh)
    layout_map = layout_map if layout_map is not None else keras.distribution.LayoutMap(mesh)
    batch_axis = BATCH_AXIS if BATCH_AXIS in mesh.axis_names else mesh.axis_names[0]
    shard_over = MODEL_AXIS if MODEL_AXIS in mesh.axis_names else batch_axis
    distribution = _shape_rule_parallel()(layout_map=layout_map, batch_dim_name=batch_axis, shard_axis_name=shard_over)
    distribution.acceltrain_name = "FSDP" if kind == "fsdp" else f"ModelParallel {' × '.join(map(str, mesh.shape))}"
    _made.add(distribution)
    return distribution


@functools.cache
def _shape_rule_parallel():
    """The class, made on first use: Keras is imported only after connect()."""
    import keras

    from acceltrain import sharding

    class ShapeRuleParallel(keras.distribution.ModelParallel):
        """ModelParallel where a weight its LayoutMap does not name is laid out by the fsdp rule on
        `shard_axis_name`, and a layout that does not divide its weight replicates it instead of failing.

        Keras asks `get_variable_layout` as each variable is created, so weights are never whole on
        one device first; optimizer slots take their variable's layout (Keras's add_variable_from_reference).
        """

        def __init__(self, *, layout_map, batch_dim_name, shard_axis_name):
            super().__init__(layout_map=layout_map, batch_dim_name=batch_dim_name)
            self.shard_axis_name = shard_axis_name
            self.indivisible = {}  # path -> (shape, spec wanted): weights left whole, to warn about

        def get_variable_layout(self, variable):
            shape = tuple(variable.shape)
            mesh_shape = dict(zip(self.device_mesh.axis_names, self.device_mesh.shape))
            layout = self.get_tensor_layout(variable.path)
            if layout is not None:
                if _divides(shape, layout.axes, mesh_shape):
                    return layout
                self.indivisible[variable.path] = (shape, tuple(layout.axes))
            else:
                size = mesh_shape[self.shard_axis_name]
                if not sharding.indivisible(shape, size):
                    return keras.distribution.TensorLayout(sharding.fsdp_spec(shape, size, self.shard_axis_name),
                                                           self.device_mesh)
                self.indivisible[variable.path] = (shape, (self.shard_axis_name,))
            return keras.distribution.TensorLayout([None] * len(shape), self.device_mesh)

    return ShapeRuleParallel


def _divides(shape, axes, mesh_shape) -> bool:
    if len(axes) != len(shape):
        return False
    return all(size % sharding_parts((axis,), mesh_shape) == 0 for size, axis in zip(shape, axes))


def sharding_parts(spec, mesh_shape) -> int:
    from acceltrain import sharding

    return sharding.spec_divisor(tuple(spec), mesh_shape)


def is_layout_map(value) -> bool:
    import keras

    return isinstance(value, keras.distribution.LayoutMap)


def indivisible_weights(distribution) -> dict:
    """Weights a sharded distribution had to leave whole: path -> (shape, the spec that did not divide)."""
    return dict(getattr(distribution, "indivisible", {}))
