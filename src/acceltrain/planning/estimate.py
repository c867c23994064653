"""The analytic plan, where no compiler for the target runs here (GPU boxes; TPUs without libtpu).

Bytes per device: each variable's bytes laid out by the candidate's rule (weights, optimizer slots, and a
gradient per trainable weight), plus every intermediate array of the forward pass at the per-device batch
(an upper bound of the activations the backward pass keeps). FLOPs: every matmul and convolution of the
traced training step, counted from its jaxpr. Both from the real model's shapes; neither is a compiler's.
"""

import math

from acceltrain import sharding


def state_bytes_per_device(abstract, layout) -> int:
    """Weights, gradients and optimizer variables on one device under `layout`'s rule."""
    model = abstract.model

    def share(variable) -> int:
        parts = sharding.spec_divisor(layout.weight_spec(variable.shape), dict(zip(layout.axis_names, layout.mesh_shape)))
        return math.prod(variable.shape) * sharding.dtype_bytes(str(variable.dtype)) // parts

    trainable = sum(share(v) for v in model.trainable_variables)
    return 2 * trainable + sum(share(v) for v in model.non_trainable_variables) \
        + sum(share(v) for v in model.optimizer.variables)


def activation_bytes(abstract, per_device_batch: int) -> int:
    """The forward pass's intermediate arrays at this batch, summed (an upper bound of what is kept)."""
    import jax

    model = abstract.model
    (trainable, non_trainable, _, _), (x, _) = _abstract_arguments(abstract, per_device_batch)

    def forward(trainable, non_trainable, x):
        return model.stateless_call(trainable, non_trainable, x, training=True)[0]

    jaxpr = jax.make_jaxpr(forward)(trainable, non_trainable, x)
    return sum(_nbytes(var.aval) for eqn in _equations(jaxpr.jaxpr) for var in eqn.outvars)


def step_flops(train_step, abstract, global_batch: int) -> float:
    """Multiply-adds x 2 of every dot_general and convolution in `train_step` (step.train_step(abstract)), traced."""
    from acceltrain.backends.jax import compiles

    return float(compiles.traced_matmul_flops(train_step, *_abstract_arguments(abstract, global_batch)))


def _abstract_arguments(abstract, batch: int) -> tuple:
    """(state, (x, y)) as the training step takes them, unplaced."""
    import jax

    model = abstract.model

    def specs(variables):
        return [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype) for v in variables]

    state = (specs(model.trainable_variables), specs(model.non_trainable_variables),
             specs(model.optimizer.variables), specs(model.metrics_variables))
    return state, abstract.batch_specs(batch)


def _equations(jaxpr):
    """Every equation, including those inside sub-programs (jit, custom_vjp, checkpoint ...)."""
    from acceltrain.backends.jax import compiles

    for eqn in jaxpr.eqns:
        yield eqn
        for inner in compiles.sub_programs(eqn):
            yield from _equations(inner)


def _nbytes(aval) -> int:
    shape = getattr(aval, "shape", ())
    return math.prod(shape) * sharding.dtype_bytes(str(getattr(aval, "dtype", "float32")))
