"""Where `--verify`'s tolerances sit: how far correct models and wrong ones differ from one device, per precision.

    python benchmarks/verify_tolerance.py [--steps 3] [--quick]

One JAX process on 8 simulated CPU devices. Each model's first fit is verified (layout/verify.py::verify, its
`steps` steps on the layout and on one device from the same weights and batches) under each layout and each
precision (float32, mixed_bfloat16, mixed_float16), and its verdict's figures recorded, whichever way it went:
- correct models, which must pass: an MLP with dropout and metrics=["accuracy"] (Adam 1e-2), Dense → BatchNorm →
  ReLU (Adam 1e-2), Conv2D (its default bias) → BatchNorm → ReLU ("adam"), an Embedding → pooling → Dense, and a
  Dense with LoRA (its kernel frozen, the adapters trained), each under data, fsdp and model;
- wrong ones, which must fail: a row-parallel layer that forgets its all-reduce (on the 2 × 4 mesh it was written
  for) and a loss divided by the replica count by hand (read from Keras's distribution as the step is traced).
Beside them each weight's first-step gradient in float32 (root mean square over the largest, in float32 roundings):
the weights verify recognizes as having none but round-off, and the smallest it compares. The section says, per
precision, the largest difference of a correct model and the smallest of a wrong one against the tolerance in
layout/verify.py; tests/layout/test_verify.py checks the committed record against those constants.
--quick: float32 only, two correct models and one wrong, data layout only.
"""

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _results  # noqa: E402

SECTION = "verify-tolerance"
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
LAYOUTS = ("data", "fsdp", "model")
CORRECT = ("mlp_dropout", "dense_batchnorm", "conv_batchnorm", "embedding", "lora")
WRONG = ("forgets_all_reduce", "loss_divided_by_replicas")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    _results.add_arguments(parser)
    args = parser.parse_args()
    run = _results.Run(__file__, args)
    precisions, layouts = (("float32",), ("data",)) if args.quick else (PRECISIONS, LAYOUTS)
    correct, wrong = (CORRECT[:2], WRONG[1:]) if args.quick else (CORRECT, WRONG)
    import acceltrain

    acceltrain.connect(simulate_devices=8, verbose=False).close()  # JAX started with 8 devices
    import keras

    runs = []
    for precision in precisions:
        for name in correct:
            for layout in layouts:
                runs.append(_verified(acceltrain, keras, name, precision, layout, args.steps, wrong=False))
        for name in wrong:
            runs.append(_verified(acceltrain, keras, name, precision, None, args.steps, wrong=True))
    run.save(SECTION, {"steps": args.steps, "devices": 8, "runs": runs})


def _verified(acceltrain, keras, name: str, precision: str, layout, steps: int, *, wrong: bool) -> dict:
    from acceltrain.layout import verify

    distribution = layout or ("model" if name != "forgets_all_reduce" else _row_parallel_layout(keras))
    if name == "loss_divided_by_replicas":
        distribution = "data"
    keras.config.set_dtype_policy(precision)  # precision="auto" keeps a global policy the user set
    try:
        runtime = acceltrain.connect(simulate_devices=8, distribution=distribution, verbose=False)
        with runtime:
            runtime.seed(0)
            model = runtime.build(MODELS[name])
            x, y = _data(name)
            try:
                verdict = verify.verify(runtime, model, x, y, 64, steps)
            except verify.VerificationFailed as failed:
                verdict = failed.verdict
    finally:
        keras.config.set_dtype_policy("float32")
    return {"model": name, "precision": precision, "computes_in": verdict.precision,
            "layout": runtime.distribution_name, "wrong": wrong, "passed": verdict.passed,
            "loss_difference": verdict.loss_difference, "weight_difference": verdict.weight_difference,
            "worst": verdict.worst[0][0] if verdict.worst else None, "tolerance": verdict.tolerance,
            "without_gradient": verdict.without_gradient, "gradient_sizes": verdict.gradient_sizes}


def _data(name: str):
    import numpy as np

    rng = np.random.default_rng(0)
    if name == "conv_batchnorm":
        x = rng.normal(size=(256, 12, 12, 1)).astype(np.float32)
        return x, (x.mean(axis=(1, 2, 3)) > 0).astype(np.int32)
    if name == "embedding":
        x = rng.integers(0, 100, size=(256, 10)).astype(np.int32)
        return x, (x[:, 0] % 2).astype(np.int32)
    x = rng.normal(size=(256, 64)).astype(np.float32)
    return x, x[:, :4].argmax(axis=1).astype(np.int32)


def _compiled(model, optimizer):
    import keras

    model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def mlp_dropout():
    import keras

    return _compiled(keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                                       keras.layers.Dropout(0.1), keras.layers.Dense(4)]), keras.optimizers.Adam(1e-2))


def dense_batchnorm():
    import keras

    return _compiled(keras.Sequential([keras.Input((64,)), keras.layers.Dense(64), keras.layers.BatchNormalization(),
                                       keras.layers.ReLU(), keras.layers.Dense(4)]), keras.optimizers.Adam(1e-2))


def conv_batchnorm():
    import keras

    return _compiled(keras.Sequential([keras.Input((12, 12, 1)), keras.layers.Conv2D(8, 3),
                                       keras.layers.BatchNormalization(), keras.layers.ReLU(),
                                       keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2)]), "adam")


def embedding():
    import keras

    return _compiled(keras.Sequential([keras.Input((10,), dtype="int32"), keras.layers.Embedding(100, 32),
                                       keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(2)]), "adam")


def lora():
    import keras

    dense = keras.layers.Dense(64, activation="relu")
    model = keras.Sequential([keras.Input((64,)), dense, keras.layers.Dense(4)])
    dense.enable_lora(4)  # the kernel frozen, its two low-rank adapters trained
    return _compiled(model, keras.optimizers.Adam(1e-3))


def forgets_all_reduce():
    """A row-parallel Dense written for a mesh with a "model" axis, which forgets the sum over it (the tests' own,
    tests/layout/test_verify.py::forgetting_its_sum)."""
    import keras

    from tests.layout.test_verify import forgetting_its_sum

    return _compiled(keras.Sequential([keras.Input((64,)), forgetting_its_sum(name="row_parallel"),
                                       keras.layers.Dense(4, name="head")]), keras.optimizers.Adam(1e-2))


def _row_parallel_layout(keras):
    mesh = keras.distribution.DeviceMesh((2, 4), ["batch", "model"], keras.distribution.list_devices())
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[".*row_parallel/kernel"] = ("model", None)
    return layout_map


def loss_divided_by_replicas():
    """The loss divided by the replica count by hand, as tf.distribute's custom loops once wanted."""
    import keras

    cross_entropy = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def loss(y_true, y_pred):
        distribution = keras.distribution.distribution()
        replicas = distribution.device_mesh.devices.size if distribution is not None else 1
        return cross_entropy(y_true, y_pred) / replicas

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(4)])
    model.compile(keras.optimizers.Adam(1e-2), loss)
    return model


MODELS = {function.__name__: function for function in (mlp_dropout, dense_batchnorm, conv_batchnorm, embedding, lora,
                                                          forgets_all_reduce, loss_divided_by_replicas)}


# --- Rendering ----------------------------------------------------------------------------------

def summarize(raw: dict) -> dict:
    from acceltrain.layout.verify import NO_GRADIENT, TOLERANCES, _ROUNDING

    by_precision = {}
    for found in raw["runs"]:
        entry = by_precision.setdefault(found["computes_in"], {"correct": [], "wrong": []})
        entry["wrong" if found["wrong"] else "correct"].append(found)
    rounding = _ROUNDING["float32"]
    recognized, compared = [], []
    for found in raw["runs"]:
        for path, size in found["gradient_sizes"].items():
            (recognized if path in found["without_gradient"] else compared).append(size / rounding)
    precisions = {}
    for precision, entry in by_precision.items():
        def largest(runs):
            return max(max(r["loss_difference"], r["weight_difference"]) for r in runs) if runs else None

        def smallest(runs):
            return min(max(r["loss_difference"], r["weight_difference"]) for r in runs) if runs else None

        tolerance = TOLERANCES[precision]  # today's, judging the differences measured

        def over(r):
            return max(r["loss_difference"], r["weight_difference"]) > tolerance

        precisions[precision] = {
            "tolerance": tolerance, "correct_runs": len(entry["correct"]), "wrong_runs": len(entry["wrong"]),
            "correct_largest": largest(entry["correct"]), "wrong_smallest": smallest(entry["wrong"]),
            "correct_failed": [f"{r['model']} on {r['layout']}" for r in entry["correct"] if over(r)],
            "wrong_passed": [f"{r['model']} on {r['layout']}" for r in entry["wrong"] if not over(r)]}
    return {"steps": raw["steps"], "devices": raw["devices"], "precisions": precisions, "no_gradient": NO_GRADIENT,
            "recognized_largest": max(recognized, default=None), "compared_smallest": min(compared, default=None)}


def render(summary: dict, record: dict) -> str:
    rows = ["| computes in | tolerance | correct runs: largest difference | wrong runs: smallest difference | "
            "margins |", "|---|---|---|---|---|"]
    for precision, found in summary["precisions"].items():
        tolerance, high, low = found["tolerance"], found["correct_largest"], found["wrong_smallest"]
        margins = []
        if high:
            margins.append(f"the tolerance {tolerance / high:,.0f}× the largest correct")
        if low:
            margins.append(f"the smallest wrong {low / tolerance:,.0f}× the tolerance")
        rows.append(f"| {precision} | {tolerance:.0e} | {found['correct_runs']}: {_figure(high)} | "
                    f"{found['wrong_runs']}: {_figure(low)} | {'; '.join(margins)} |")
    misjudged = [f"{precision}: {', '.join(found['correct_failed'] + found['wrong_passed'])}"
                 for precision, found in summary["precisions"].items()
                 if found["correct_failed"] or found["wrong_passed"]]
    judged = ("Against the tolerances in training/verify.py, every correct run is under its own and every wrong one "
              "over it." if not misjudged else
              "Misjudged (a correct run over its tolerance, or a wrong one under it): " + "; ".join(misjudged) + ".")
    gradients = ""
    if summary["recognized_largest"] is not None or summary["compared_smallest"] is not None:
        gradients = (f" Weights recognized as having no gradient but round-off (a bias before BatchNormalization): "
                     f"first-step gradients in float32 of at most {_figure(summary['recognized_largest'])} float32 "
                     f"roundings of the largest; every weight compared had at least "
                     f"{_figure(summary['compared_smallest'])}; the line drawn at {summary['no_gradient']:.0e}.")
    return (
        "## How far `--verify` lets a run differ from one device, per precision\n\n"
        f"`{record['command']}`: each model's first fit verified ({summary['steps']} steps on the layout and on one "
        f"device, {summary['devices']} simulated devices), the difference being the larger of the losses' and the "
        "weights' relative differences. Correct models: an MLP with dropout, Dense → BatchNorm and Conv2D → "
        "BatchNorm, an Embedding model and LoRA, each under data, fsdp and model; wrong ones: a layer that forgets "
        f"its all-reduce, a loss divided by the replica count by hand. {judged}{gradients}\n\n" + "\n".join(rows)
    )


# Quotes whose figures a busy machine does not change (differences of weights):
# quoted from a loaded record too (render.py).
LOAD_FREE = ("per-precision",)


def quotes(summary: dict, record: dict) -> dict:
    """`per-precision`: each precision's tolerance beside the largest difference of a correct model and the smallest
    of a wrong one."""
    said = "; ".join(
        f"{precision}: tolerance {found['tolerance']:.0e}, correct models at most {_figure(found['correct_largest'])}, "
        f"wrong ones at least {_figure(found['wrong_smallest'])}" for precision, found in summary["precisions"].items())
    return {"per-precision": f"{said} ({_results.cite(record)})"}


def _figure(value) -> str:
    return "—" if value is None else f"{value:.1e}"


if __name__ == "__main__":
    main()
