"""--verify N / Runtime.fit(verify=N) (training/verify.py): N steps on the run's layout and on one device from the
same weights and batches, compared before training. It passes on data, fsdp and model layouts, and fails on a layer
written for a layout that forgets its all-reduce, naming the weight, before any step trains."""

import numpy as np
import pytest

import acceltrain
from acceltrain.training.verify import TOLERANCE, VerificationFailed, compare
from tests import support

pytestmark = pytest.mark.multi_device


@pytest.mark.parametrize("losses, alone, weights, alone_weights, loss_difference, weight_difference, worst", [
    # The same: nothing differs.
    ([1.0, 0.5], [1.0, 0.5], [[1.0, 2.0]], [[1.0, 2.0]], 0.0, 0.0, "w0"),
    # The losses relative to the one-device loss; each weight by the norm of its difference over its own norm.
    ([1.0, 0.6], [1.0, 0.5], [[3.0, 4.0], [1.0, 0.0]], [[3.0, 4.0], [1.0, 1.0]], 0.2, 1 / 2**0.5, "w1"),
    # A weight that is zero on one device: its difference counts against the smallest norm, not a division by zero.
    ([1.0], [1.0], [[1e-3]], [[0.0]], 0.0, 1e9, "w0"),
])
def test_the_verdict_is_the_largest_relative_difference(losses, alone, weights, alone_weights, loss_difference,
                                                       weight_difference, worst):
    verdict = compare(losses, alone, weights, alone_weights, [f"w{i}" for i in range(len(weights))], steps=2,
                      batch_size=8, layout="FSDP")
    assert verdict.loss_difference == pytest.approx(loss_difference)
    assert verdict.weight_difference == pytest.approx(weight_difference)
    assert verdict.worst[0][0] == worst
    assert verdict.passed == (max(loss_difference, weight_difference) <= TOLERANCE)


def _mlp():
    import keras

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dropout(0.1), keras.layers.Dense(4)], name="mlp")
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def _data(n=256, features=64):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, features)).astype(np.float32)
    return x, x[:, :4].argmax(axis=1).astype(np.int32)


@pytest.mark.parametrize("distribution", ["data", "fsdp", "model"])
def test_verify_passes_on_each_layout_and_training_starts_from_the_weights_as_they_were(distribution, capsys):
    runtime = acceltrain.connect(simulate_devices=8, distribution=distribution, verbose=False)
    runtime.seed(0)
    model = runtime.build(_mlp)
    before = [np.asarray(v.value) for v in model.trainable_variables]
    x, y = _data()
    runtime.fit(model, x, y, batch_size=64, epochs=0, verify=3, verbose=0)  # no epoch: the verification only

    line = next(line for line in capsys.readouterr().err.splitlines() if "verify:" in line and "tolerance" in line)
    assert f"verify: 3 step(s) of batch 64 on {runtime.distribution_name} and on one device, from the same " in line
    assert line.endswith("tolerance 1e-04 → training starts from the weights as they were")
    for got, expected in zip(model.trainable_variables, before):
        np.testing.assert_array_equal(np.asarray(got.value), expected)
    assert int(model.optimizer.iterations) == 0  # the verification steps do not count


def _forgets_its_all_reduce():
    """A row-parallel Dense written for a mesh with a "model" axis, over which its kernel's rows (and its inputs'
    features) are cut: each device multiplies its slices with its own shard_map, and the sum over the model axis is
    forgotten, so each keeps its partial sum (out_specs says the output is whole). On one device there is one
    slice, so it is right there: only a distributed run computes something else."""
    import jax
    import keras
    from jax.sharding import PartitionSpec as P

    class RowParallelDense(keras.layers.Layer):
        def build(self, input_shape):
            self.kernel = self.add_weight(shape=(input_shape[-1], 16), name="kernel")

        def call(self, x):
            distribution = keras.distribution.distribution()
            if distribution is None or "model" not in distribution.device_mesh.axis_names:
                return x @ self.kernel
            partial = jax.shard_map(lambda x, kernel: x @ kernel, mesh=distribution.device_mesh.backend_mesh,
                                    in_specs=(P(None, "model"), P("model", None)), out_specs=P(), check_vma=False)
            return partial(x, keras.ops.convert_to_tensor(self.kernel))  # the jax.lax.psum(..., "model") is missing

        def compute_output_shape(self, input_shape):
            return (*input_shape[:-1], 16)

    model = keras.Sequential([keras.Input((64,)), RowParallelDense(name="row_parallel"),
                              keras.layers.Dense(4, name="head")],
                             name="forgets_all_reduce")
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_verify_fails_on_a_layer_that_forgets_its_all_reduce_naming_the_weight_before_training(capsys):
    import keras

    mesh = keras.distribution.DeviceMesh((2, 4), ["batch", "model"], keras.distribution.list_devices())
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[".*row_parallel/kernel"] = ("model", None)  # the layout the layer was written for
    runtime = acceltrain.connect(simulate_devices=8, distribution=layout_map, verbose=False)
    runtime.seed(0)
    model = runtime.build(_forgets_its_all_reduce)
    x, y = _data()
    with pytest.raises(VerificationFailed) as failed:
        runtime.fit(model, x, y, batch_size=64, epochs=1, verify=3, verbose=0)
    message = str(failed.value)
    assert "Over the tolerance: under ModelParallel 2 × 4 the model computes something else than on one device" in message
    worst = message.split("(most: ")[1].split(",")[0]
    # The layer's own kernel, or the head right after it, whose gradients the wrong sums feed.
    assert worst.split()[0] in ("forgets_all_reduce/row_parallel/kernel", "forgets_all_reduce/head/kernel",
                                "forgets_all_reduce/head/bias") and float(worst.split()[1]) > 100 * TOLERANCE
    assert failed.value.exit_code == 1 and int(model.optimizer.iterations) == 0  # training did not start


def test_verify_must_be_a_whole_number_of_steps():
    from acceltrain.errors import UsageError
    from acceltrain.training.verify import check_steps

    assert check_steps(None) is None and check_steps(3) == 3
    with pytest.raises(UsageError, match=r"Received --verify 0\. Expected a whole number of at least 1"):
        check_steps(0, "--verify")


# --- Under `acceltrain run`, on the corpus's scripts (slow: a process each) ------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("distribution", ["data", "fsdp", "model"])
@pytest.mark.parametrize("script", ["sequential_validation_split", "functional_two_in_two_out", "custom_train_step",
                                    "gan_two_optimizers", "finetune_frozen"])
def test_run_verify_passes_on_the_corpus_scripts(script, distribution, small_mnist):
    from tests.corpus import BY_NAME

    shape = BY_NAME[script]
    run = support.run_cli("run", "--simulate-devices", "8", "--distribution", distribution, "--verify", "3",
                          shape.path, *([small_mnist] if shape.mnist else []), timeout=600)
    assert run.returncode == 0, run.stderr
    assert "→ training starts from the weights as they were" in run.stderr
