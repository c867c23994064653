"""The `acceltrain` command. A thin layer: each verb parses its flags and calls one function.

Exit codes: 0 done; 1 failed; 2 bad usage or bad input. Errors print one message, no traceback.
"""

import argparse
import json
import sys

from acceltrain import __version__, log
from acceltrain.errors import AcceltrainError

EXAMPLES = {
    "devices": "example:\n  acceltrain devices --simulate-devices 8 --json",
    "train": (
        "examples:\n"
        "  acceltrain train                                   # the seed's MNIST MLP on the best hardware here\n"
        "  acceltrain train --seed 1 --out runs/seed1\n"
        "  acceltrain train --learning-rate 1e-2             # the seed's exact constant rate\n"
        "  acceltrain train --simulate-devices 8             # 8 CPU devices, data parallel\n"
        "  acceltrain train --backend tensorflow --platform tpu   # TensorFlow's TPUStrategy, as the seed\n"
        "  acceltrain train --model my_models.py:build --data my_data.npz\n"
        "  acceltrain train --out runs/a --resume             # continue a run that was stopped"
    ),
}


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    log.set_quiet(getattr(args, "quiet", False))
    try:
        return args.run(args)
    except AcceltrainError as error:
        print(f"acceltrain: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("acceltrain: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acceltrain",
        description="Train any Keras 3 model on whatever hardware is there: TPU, GPUs or CPU.",
    )
    parser.add_argument("--version", action="version", version=f"acceltrain {__version__}")
    verbs = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    devices = _verb(verbs, "devices", "show the hardware connect() finds and what it would do with it")
    devices.add_argument("--json", action="store_true", help="print Runtime.describe() as JSON")
    _add_connect_flags(devices)
    devices.set_defaults(run=_devices)

    train = _verb(verbs, "train", "train a recipe (default: the seed's MNIST MLP) or your own model")
    train.add_argument("recipe", nargs="?", default="mnist-mlp", help="a built-in job (default: mnist-mlp)")
    train.add_argument("--model", metavar="FILE.py:FUNCTION", help="train the Keras model FUNCTION() returns")
    train.add_argument("--data", metavar="FILE.npz", help="x_train, y_train, x_test, y_test (default: bundled MNIST)")
    train.add_argument("--epochs", type=int, help="default: the recipe's (20)")
    train.add_argument("--batch-size", type=int, help="the global batch, over all replicas (default: 1200)")
    train.add_argument("--learning-rate", type=float,
                       help="a constant rate (default: the recipe's schedule, cosine from 2e-3 to 0)")
    train.add_argument("--out", metavar="DIR", help="where outputs go (default: runs/<timestamp>)")
    train.add_argument("--seed", type=int, default=0, help="seeds weights and data order (default: 0)")
    train.add_argument("--resume", action="store_true", help="continue from the newest good checkpoint in --out")
    train.add_argument("--overwrite", action="store_true", help="replace what a previous run left in --out")
    train.add_argument("--checkpoint-every", default="1 epoch", metavar="N [epochs|steps]",
                       help="how often to checkpoint into --out/checkpoints (default: 1 epoch)")
    train.add_argument("--keep-checkpoints", type=int, default=2, metavar="K",
                       help="keep the newest K checkpoints (default: 2)")
    _add_connect_flags(train)
    train.set_defaults(run=_train)
    return parser


def _verb(verbs, name: str, help: str) -> argparse.ArgumentParser:
    parser = verbs.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".",
                              epilog=EXAMPLES[name], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-q", "--quiet", action="store_true", help="print results and errors only")
    return parser


def _add_connect_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", help="jax (default) or tensorflow")
    parser.add_argument("--simulate-devices", type=int, metavar="N",
                        help="split this CPU into N devices to try multi-device runs")
    parser.add_argument("--distribution", default="auto", help="auto (default), data or none")
    parser.add_argument("--platform", default="auto", help="auto (default: TPU, else GPU, else CPU), tpu, gpu or cpu")
    parser.add_argument("--tpu", metavar="NAME", help="a TPU's name or address to connect to (tensorflow backend)")


def _devices(args) -> int:
    from acceltrain.runtime import connect

    runtime = connect(args.backend, simulate_devices=args.simulate_devices, distribution=args.distribution,
                      platform=args.platform, tpu=args.tpu, verbose=False)
    if args.json:
        print(json.dumps(runtime.describe(), indent=2))
    else:
        print(runtime)
        for topic, decision in runtime.describe()["decisions"].items():
            print(f"  {topic}: {decision}")
    return 0


def _train(args) -> int:
    from acceltrain.job import TrainConfig, train_and_evaluate

    config = TrainConfig(
        recipe=args.recipe, model=args.model, data=args.data, epochs=args.epochs, batch_size=args.batch_size,
        learning_rate=args.learning_rate, out=args.out, backend=args.backend,
        simulate_devices=args.simulate_devices, distribution=args.distribution, seed=args.seed,
        platform=args.platform, tpu=args.tpu,
        resume=args.resume, overwrite=args.overwrite, checkpoint_every=args.checkpoint_every,
        keep_checkpoints=args.keep_checkpoints,
    )
    metrics = train_and_evaluate(config)
    accuracy = metrics["test_accuracy"]
    print(f"test accuracy: {accuracy:.4f}" if accuracy is not None else f"test metrics: {metrics['test_metrics']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
