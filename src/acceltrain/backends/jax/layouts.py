"""Where a model's variables live: the layout a distribution would give each (an optimizer slot its weight's), a
variable moved to a new layout one at a time, into how many parts each is cut, the bytes the first device holds, and
a model's weights measured from shapes with nothing allocated (jax.eval_shape)."""

import math

import jax

from acceltrain.backends.jax.distribution import sharding_parts


class _AsIfNew:
    """A variable as a distribution sees it while it is created: its path, shape, dtype and trainable, and no layout
    yet (Keras's DataParallel and ModelParallel return a variable's own layout when it has one)."""

    def __init__(self, variable):
        self.path, self.name, self.shape = variable.path, variable.name, tuple(variable.shape)
        self.dtype, self.trainable, self._layout = variable.dtype, variable.trainable, None


def _layout_for(distribution, variable, references):
    """The layout `distribution` gives `variable` were it created now; an optimizer slot takes its weight's."""
    return distribution.get_variable_layout(_AsIfNew(references.get(id(variable), variable)))


def layouts_of(distribution, variables, references=None) -> list[tuple]:
    """The spec each variable would take under `distribution` (as Keras asks it when a variable is created), as
    tuples of mesh axis names; an optimizer slot takes its weight's (`references`: id(slot) -> weight)."""
    return [tuple(_layout_for(distribution, variable, references or {}).axes) for variable in variables]


def relayout(variables, distribution, references=None) -> int:
    """Move each variable to the layout `distribution` gives it (an optimizer slot: its weight's, `references`),
    one variable at a time, so a device holds at most one variable's old and new parts at once. The variable keeps
    the new layout for what is made from it later (an optimizer slot takes its weight's layout). Returns the bytes
    of the variables moved.

    An array spanning several processes moves through jit with out_shardings (device_put takes only arrays this
    process holds whole)."""
    from acceltrain.backends import keras_internals

    moved = 0
    for variable in variables:
        layout = _layout_for(distribution, variable, references or {})
        target = layout.backend_layout
        current = variable.value.sharding
        if current == target or (hasattr(current, "is_equivalent_to")
                                 and current.is_equivalent_to(target, len(variable.shape))):
            keras_internals.set_layout(variable, layout)
            continue
        array = variable.value
        value = jax.device_put(array, target) if array.is_fully_addressable else _moved(array, target)
        keras_internals.set_layout(variable, layout, value)
        moved += value.nbytes
    return moved


def _moved(array, sharding):
    return jax.jit(_identity, out_shardings=sharding)(array)


def _identity(array):
    return array


def variable_layouts(variables) -> list[tuple[str, tuple[int, ...], str, int]]:
    """(path, shape, dtype, parts) of each variable: into how many pieces its placement cuts it."""
    rows = []
    for variable in variables:
        placed = getattr(getattr(variable, "value", None), "sharding", None)
        parts = 1
        if placed is not None and hasattr(placed, "spec"):
            parts = sharding_parts(placed.spec, dict(placed.mesh.shape))
        rows.append((variable.path, tuple(variable.shape), str(variable.dtype), parts))
    return rows


def first_device_bytes(variables) -> int:
    """Bytes the first device holds of these variables, read from their arrays' addressable shards."""
    total = 0
    for variable in variables:
        array = getattr(variable, "value", variable)
        first = min(array.sharding.device_set, key=lambda device: device.id)
        total += sum(shard.data.nbytes for shard in array.addressable_shards if shard.device == first)
    return total


def abstract_state(build_model):
    """The weights `build_model()` would create and its optimizer's slot bytes, with nothing allocated.

    The build runs under jax.eval_shape: initializers give shapes, not arrays, so a model too big for
    any device is measured on a laptop. Returns ([(path, shape, dtype, trainable)], slot_bytes).
    """
    found = []
    slot_bytes = []

    def probe():
        model = build_model()
        found.extend((v.path, tuple(v.shape), str(v.dtype), v.trainable) for v in model.weights)
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None:
            optimizer.build(model.trainable_variables)
            slot_bytes.append(sum(math.prod(v.shape) * jax.numpy.dtype(v.dtype).itemsize
                                  for v in optimizer.variables if len(v.shape) > 0))
        return jax.numpy.zeros(())

    from acceltrain.backends import keras_internals

    with keras_internals.keras_state_kept():
        jax.eval_shape(probe)
    return found, (slot_bytes[0] if slot_bytes else None)
