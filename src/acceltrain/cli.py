"""The `acceltrain` command. A thin layer: each verb parses its flags and calls one function.

Exit codes: 0 done; 1 failed; 2 bad usage or bad input; 42 preempted, checkpoint saved, restart me (preemption.py).
Errors print one message, no traceback.
"""

import argparse
import contextlib
import json
import sys

from acceltrain import __version__, backends, errors, ledger, log, preemption, user_model
from acceltrain.decisions import CHECKPOINT_SHARE, MOST_SECONDS_BETWEEN_CHECKPOINTS, PRECISIONS
from acceltrain.errors import AcceltrainError, UsageError
from acceltrain.hardware import PLATFORMS

EXAMPLES = {
    "devices": "example:\n  acceltrain devices --simulate-devices 8 --json",
    "train": (
        "examples:\n"
        "  acceltrain train                                   # the seed's MNIST MLP on the best hardware here\n"
        "  acceltrain train --seed 1 --out runs/seed1\n"
        "  acceltrain train --learning-rate 1e-2             # the seed's exact constant rate\n"
        "  acceltrain train --simulate-devices 8             # 8 CPU devices, data parallel\n"
        "  acceltrain train gemma-tiny --simulate-devices 8 --distribution fsdp   # weights cut over 8 devices\n"
        "  acceltrain train --model big.py:build --simulate-devices 8 --device-memory 128MiB   # auto shards to fit\n"
        "  acceltrain train --backend tensorflow --platform tpu   # TensorFlow's TPUStrategy, as the seed\n"
        "  acceltrain train --model my_models.py:build --data my_data.npz\n"
        "  acceltrain train --out runs/a --resume             # continue a stopped run (or start one); SIGTERM: exit 42\n"
        "  acceltrain train --config run.toml --epochs 5      # a config file; flags override it\n"
        "  acceltrain train --config runs/seed1/config.toml   # rerun a run with its resolved settings\n"
        "  acceltrain train --epochs 2 --tensorboard          # then: tensorboard --logdir runs"
    ),
    "report": (
        "examples:\n"
        "  acceltrain report runs/seed1        # redraw report.png, report.md and report.html from its metrics.json"
    ),
    "doctor": (
        "examples:\n"
        "  acceltrain doctor                          # check this machine for a run here\n"
        "  acceltrain doctor --simulate-devices 8     # also dry-run an 8-device data-parallel step\n"
        "  acceltrain doctor --json --out runs        # machine-readable; checks runs/ is writable"
    ),
    "run": (
        "examples:\n"
        "  acceltrain run train.py --epochs 3                 # your script, unchanged, on the best hardware here\n"
        "  acceltrain run --simulate-devices 8 train.py       # on 8 CPU devices, data parallel\n"
        "  srun acceltrain run train.py                       # one process per SLURM task, found by itself\n"
        "  acceltrain run --checkpoint-dir ckpt --resume train.py   # SIGTERM/SIGUSR1: checkpoint, exit 42; rerun as is\n"
        "  acceltrain run --simulate-devices 8 --device-memory 128MiB --verify 3 train.py   # shard to fit, verified\n"
        "  acceltrain run --coordinator 10.0.0.1:1234 --num-processes 2 --process-id 0 train.py"
    ),
    "launch": (
        "examples:\n"
        "  acceltrain launch --processes 2 --simulate-devices 2 train.py   # 2 processes × 2 devices here\n"
        "  acceltrain launch --emit jobset --target tpu-v5e-16 train.py --epochs 3 > job.yaml   # a GKE JobSet\n"
        "  acceltrain launch --emit sbatch --target h100-8 --nodes 2 train.py > job.sh          # Slurm\n"
        "  acceltrain launch --emit skypilot --target tpu-v6e-32 train.py > task.yaml           # SkyPilot\n"
        "  acceltrain launch --emit ray --target cpu --nodes 2 train.py > ray_job.py            # Ray\n"
        "  acceltrain launch --processes 2 --checkpoint-dir ckpt --resume train.py   # rerun as is after a preemption\n"
        "exit 42: preempted, checkpoint saved, restart me (a notice: SIGTERM, SIGUSR1; or a process that stopped\n"
        "making progress, named); any other failure exits 1, bad input 2."
    ),
    "plan": (
        "examples:\n"
        "  acceltrain plan --target tpu-v5e-8                 # the MNIST recipe on 8 v5e chips: fits? how fast?\n"
        "  acceltrain plan --target tpu-v4-128 --model big.py:build --batch-size 1024 --json\n"
        "  acceltrain plan --target here --device-memory 2GiB  # this machine's own compiler\n"
        "  acceltrain plan --target tpu-v5e-8 --model gemma_preset/ --lora-rank 4 --sequence-length 512 --batch-size 8"
    ),
    "bench": (
        "examples:\n"
        "  acceltrain bench                                   # plain Keras vs acceltrain vs a hand loop vs the ceiling\n"
        "  acceltrain bench --epochs 2 --samples 6000         # a quick look\n"
        "  acceltrain bench --batch-size 32                   # small steps: where a loop's overhead shows\n"
        "  acceltrain bench --json bench.json"
    ),
}


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    log.set_quiet(getattr(args, "quiet", False))
    log.set_verbose(getattr(args, "verbose", False))
    args.program = argv is None  # the `acceltrain` command itself, not a caller's main([...]) (a test's)
    if args.program:  # its stderr, quiet at start-up
        log.filter_start_up_noise()
    try:
        code = _run_verb(args)
    except Exception:
        if not backends.one_of_several_processes():
            raise
        import traceback

        traceback.print_exc()
        code = 1
    if code != 0 and backends.one_of_several_processes():
        _leave_the_job_now(code)
    if argv is None and getattr(args, "leave_at_once", False):  # the program itself (a test's call passes argv)
        _leave_at_once(code)
    return code


def _leave_at_once(code: int) -> None:
    """End the process now, without the interpreter's finalization: every module and object torn down one by one,
    2 s here once JAX is loaded, after the run's ledger has ended (so its wall would miss them; issue 31). What a
    normal exit does before that is done first: threads not marked daemon joined, the exit handlers run, the output
    flushed. For verbs whose every file is written and closed by acceltrain (`train`), never for a user's script
    (`run`), whose unclosed files finalization flushes."""
    import atexit
    import os
    import threading

    for thread in threading.enumerate():  # as a normal exit does first: threads not marked daemon finish their work
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # then logging's, JAX's, Orbax's handlers: all that a normal exit runs
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _run_verb(args) -> int:
    try:
        with errors.cli_names():  # the CLI's face: messages name the flags typed, not Python's arguments
            return args.run(args)
    except AcceltrainError as error:
        if log.is_verbose():
            import traceback

            traceback.print_exc()
        elif isinstance(error, user_model.ModelFunctionFailed):  # the user's own frames, as a plain run shows them
            user_model.print_traceback(error.error, error.path)
        print(f"acceltrain: {log.paint('error:', 'red')} {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("acceltrain: interrupted", file=sys.stderr)
        return 130


# How long a failed process of a job of several processes waits for the others at the exit barrier. Long
# enough for processes that fail the same way (one script error in every process) to arrive together, a
# few seconds apart; short, since a process whose peers are stuck in a collective waits this long in vain.
ENDING_GRACE_SECONDS = 10.0


def _leave_the_job_now(code: int) -> None:
    """End a failed process of a jax.distributed job, its error already printed, within ENDING_GRACE_SECONDS.

    A normal exit waits in jax.distributed's shutdown barrier for every other process, with no end, while
    they may be waiting for this one in a collective (an evaluate, a load_weights): neither would ever end,
    and `acceltrain launch`, which stops the job when a process exits non-zero, would never see this one
    exit. So the barrier gets the grace only: processes that failed alike end together, each showing its
    own error, and a process whose peers are stuck leaves, for the launcher to stop them (or, without a
    launcher, their jax.distributed heartbeat). os._exit skips atexit handlers and buffers: flushed first.
    """
    import logging
    import os

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    backends.shut_down_jax_job(ENDING_GRACE_SECONDS)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# --checkpoint-every's default, as decisions.choose_checkpoint_epochs and choose_checkpoint_steps apply it (in a
# help text, where argparse reads %: the percent sign doubled).
AUTO_CHECKPOINTS = (f"auto, every epoch unless that costs over {CHECKPOINT_SHARE:.0%}% of the time, then every few "
                    f"epochs, at most {MOST_SECONDS_BETWEEN_CHECKPOINTS / 60:.0f} minutes apart")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acceltrain",
        description="Train any Keras 3 model on whatever hardware is there: TPU, GPUs or CPU.",
    )
    parser.add_argument("--version", action="version", version=f"acceltrain {__version__}")
    verbs = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for add_verb in (_add_devices, _add_train, _add_report, _add_doctor, _add_run, _add_launch, _add_bench, _add_plan):
        add_verb(verbs)
    return parser


def _add_devices(verbs) -> None:
    """`acceltrain devices`: what connect() finds here."""
    devices = _verb(verbs, "devices", "show the hardware connect() finds and what it would do with it")
    devices.add_argument("--json", action="store_true", help="print Runtime.describe() as JSON")
    _add_connect_flags(devices)
    _add_memory_flag(devices)
    devices.set_defaults(run=_devices)


def _add_train(verbs) -> None:
    """`acceltrain train`: a recipe or --model, its flags also read from --config."""
    train = _verb(verbs, "train", "train a recipe (default: the seed's MNIST MLP) or your own model")
    train.add_argument("recipe", nargs="?", default="mnist-mlp", help="a built-in job (default: mnist-mlp)")
    train.add_argument("--model", metavar="FILE.py:FUNCTION", help="train the Keras model FUNCTION() returns")
    train.add_argument("--data", metavar="FILE.npz", help="x_train, y_train, x_test, y_test (default: bundled MNIST)")
    train.add_argument("--epochs", type=int, help="default: the recipe's (20)")
    train.add_argument("--batch-size", type=int, help="the global batch, over all replicas (default: 1200)")
    train.add_argument("--learning-rate", type=float,
                       help="a constant rate (default: the recipe's schedule, cosine from 2e-3 to 0; an uncompiled "
                            "--model gets Adam at this rate, else 1e-3; a compiled --model keeps its own, with a warning)")
    train.add_argument("--validation-split", type=float, metavar="F",
                       help="the last fraction F of the training samples, held out to validate on after each epoch "
                            "(default: 0.1; 0 trains on all of them)")
    train.add_argument("--out", metavar="DIR", help="where outputs go (default: runs/<timestamp>)")
    train.add_argument("--seed", type=int, default=0, help="seeds weights and data order (default: 0)")
    train.add_argument("--resume", action="store_true", help="continue from the newest good checkpoint in --out; with none there yet, start "
                       "(an engine reruns the same command)")
    train.add_argument("--overwrite", action="store_true", help="replace what a previous run left in --out")
    train.add_argument("--checkpoint-every", default="auto", metavar="auto|N [epochs|steps]",
                       help=f"how often to checkpoint into --out/checkpoints (default: {AUTO_CHECKPOINTS})")
    train.add_argument("--keep-checkpoints", type=int, default=2, metavar="K",
                       help="keep the newest K checkpoints (default: 2)")
    _add_connect_flags(train)
    _add_device_data_flag(train)
    _add_stall_timeout(train)
    _add_memory_flag(train)
    train.add_argument("--tensorboard", action=argparse.BooleanOptionalAction,
                       help="write TensorBoard logs to OUT/tensorboard (needs tensorflow installed)")
    train.add_argument("--autopilot", action=argparse.BooleanOptionalAction, help=AUTOPILOT_HELP)
    train.add_argument("--config", metavar="FILE.toml",
                       help="read these options from a TOML file (keys as the flags, with _); flags override it")
    # None means "not given on the command line", so a --config file's value stands; the defaults
    # themselves live in TrainConfig (and the help texts).
    train.set_defaults(run=_train, **{action.dest: None for action in train._actions
                                      if action.dest not in ("help", "quiet", "verbose", "config")})


def _add_report(verbs) -> None:
    """`acceltrain report DIR`: a finished run's report drawn again."""
    report = _verb(verbs, "report", "redraw report.png, report.md and report.html of a finished run from its metrics.json")
    report.add_argument("dir", metavar="DIR", help="the --out folder of an `acceltrain train` run")
    report.set_defaults(run=_report)


def _add_doctor(verbs) -> None:
    """`acceltrain doctor`: this machine checked, or one artifact (--artifact)."""
    doctor = _verb(verbs, "doctor", "check this machine for training and say how to fix what is wrong")
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON")
    doctor.add_argument("--out", metavar="DIR", default="runs", help="the output folder to check (default: runs)")
    doctor.add_argument("--batch-size", type=int, help="the global batch of the dry run (default: the recipe's)")
    doctor.add_argument("--artifact", metavar="FILE",
                        help="check only FILE, a JobSet, sbatch script or SkyPilot task `launch --emit` wrote (or "
                             "your edit of one): the JobSet against its CRD schema, each against acceltrain's needs")
    _add_connect_flags(doctor)
    doctor.set_defaults(run=_doctor)


def _add_run(verbs) -> None:
    """`acceltrain run SCRIPT.py`: a plain script, unchanged, on the hardware here (commands/run.py; launch runs it on
    several processes, commands/launch.py)."""
    run = _verb(verbs, "run", "run a Python training script, unchanged, distributed over the hardware here")
    _add_connect_flags(run)
    _add_device_data_flag(run)
    _add_memory_flag(run)
    run.add_argument("--coordinator", metavar="HOST:PORT", help="process 0's address, for a multi-host job")
    run.add_argument("--num-processes", type=int, metavar="N", help="processes in the job (one per host)")
    run.add_argument("--process-id", type=int, metavar="I", help="this process's index, 0 to N-1")
    _add_stall_timeout(run)
    _add_checkpoint_flags(run)
    _add_ledger_flag(run)
    _add_autopilot_flags(run)
    _add_script_args(run)
    run.set_defaults(run=_run)


def _add_launch(verbs) -> None:
    """`acceltrain launch`: N local processes as one JAX job, or an engine's artifact (--emit)."""
    launch = _verb(verbs, "launch", "run a script as N cooperating processes on this machine (one JAX job), or "
                                    "print what a cluster engine takes to run it on every host (--emit)")
    launch.add_argument("--processes", type=int, metavar="N",
                        help="how many processes (required without --emit; with --emit --target cpu: per node)")
    _add_emit_flags(launch)
    _add_connect_flags(launch)
    _add_device_data_flag(launch)
    _add_stall_timeout(launch)
    _add_memory_flag(launch)
    _add_checkpoint_flags(launch)
    _add_ledger_flag(launch)
    _add_autopilot_flags(launch)
    _add_script_args(launch)
    launch.set_defaults(run=_launch)


def _add_bench(verbs) -> None:
    """`acceltrain bench`: a recipe timed against plain Keras and the hardware's limit."""
    bench = _verb(verbs, "bench", "measure how fast a recipe trains here, against plain Keras and the hardware's limit")
    bench.add_argument("recipe", nargs="?", default="mnist-mlp", help="a built-in job (default: mnist-mlp)")
    bench.add_argument("--backend", help="acceltrain's backend: jax (default) or tensorflow")
    bench.add_argument("--simulate-devices", type=int, metavar="N", help="acceltrain on N simulated CPU devices")
    bench.add_argument("--epochs", type=int, default=4, help="epochs a run; the first compiles (default: 4)")
    bench.add_argument("--repeats", type=int, default=2, help="runs of each variant, interleaved (default: 2)")
    bench.add_argument("--samples", type=int, metavar="N", help="train on the first N samples (default: all)")
    bench.add_argument("--batch-size", type=int, metavar="N", help="the batch of every variant (default: the recipe's)")
    bench.add_argument("--checkpoints", action="store_true",
                       help="time acceltrain as `acceltrain train` runs it, checkpointing as it does (--checkpoint-every auto)")
    _add_device_data_flag(bench)
    bench.add_argument("--json", metavar="FILE", help="also write the full report as JSON to FILE")
    bench.set_defaults(run=_bench)


def _add_plan(verbs) -> None:
    """`acceltrain plan`: the training step compiled for hardware you might rent."""
    plan = _verb(verbs, "plan", "compile the training step for hardware you might rent: does it fit, how fast can it go")
    plan.add_argument("--target", help="what you are about to rent (required): e.g. tpu-v5e-8, v5litepod-16, "
                      "tpu-v4-128, h100-8, here")
    plan.add_argument("recipe", nargs="?", help="a built-in job (default: mnist-mlp)")
    plan.add_argument("--model", metavar="FILE.py:FUNCTION|PRESET",
                      help="plan the compiled Keras model FUNCTION() returns, or a keras_hub preset folder (its "
                           "config.json: no weights read) or a preset's config .json, as its causal LM")
    plan.add_argument("--sequence-length", type=int, metavar="N",
                      help="the size of the model's unknown input dimensions, e.g. a language model's 512 tokens")
    plan.add_argument("--lora-rank", type=int, metavar="R",
                      help="enable LoRA of rank R on the keras_hub backbone (backbone.enable_lora(R)) before planning")
    plan.add_argument("--batch-size", type=int, help="the global batch (default: the recipe's)")
    plan.add_argument("--distribution", default="auto",
                      help="auto (default: data, fsdp, model in order, up to the first that fits), data, fsdp or model")
    plan.add_argument("--compare", action="store_true",
                      help="compile every candidate distribution, not only up to the first that fits (minutes each "
                           "for a billion-parameter model)")
    plan.add_argument("--device-memory", metavar="SIZE", help="memory per device instead of the target's, e.g. 16GiB")
    plan.add_argument("--precision", default="auto", choices=PRECISIONS,
                      help="Keras's dtype policy the step is planned in (default: auto: what run and train would use "
                           "on the target: your own global policy if the model function sets one, else "
                           "mixed_bfloat16 on TPUs and GPUs of compute capability 8.0+, else float32); float32 keeps "
                           "Keras's default everywhere")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(run=_plan)


def _add_emit_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--emit", metavar="ENGINE",
                        help="print, instead of running, what ENGINE takes to run the script with `acceltrain run` on "
                             "every host of --target: jobset (GKE, xpk), sbatch (Slurm), skypilot or ray (a Ray job's driver)")
    parser.add_argument("--target", help="with --emit: the hardware, as plan names it (tpu-v5e-16, tpu-v6e-32, h100-8 "
                                         "...) or cpu")
    parser.add_argument("--nodes", type=int, metavar="N", help="with --emit: GPU boxes or CPU nodes (default: 1)")
    parser.add_argument("--image", help="with --emit jobset: the container image, with acceltrain and the script")
    parser.add_argument("--compile-cache-dir", metavar="DIR",
                        help="with --emit: the shared folder of JAX's compiled programs (default: beside "
                             "--checkpoint-dir's default, on the engine's shared storage)")
    parser.add_argument("--max-restarts", type=int, metavar="N",
                        help="with --emit jobset or ray: restarts of the whole job before it fails (default: 10)")
    parser.add_argument("--name", help="with --emit: the job's name (default: the script's)")
    parser.add_argument("--grace-period", metavar="SECONDS|FILE.json",
                        help="with --emit jobset: the pods' time from SIGTERM to SIGKILL, for the checkpoint's save "
                             "(terminationGracePeriodSeconds; default: Kubernetes's 30), or a run's ledger "
                             "(acceltrain run --ledger FILE.json) to size it from its measured checkpoints")
    parser.add_argument("--queue", metavar="NAME", help="with --emit jobset: the Kueue LocalQueue to admit the job "
                                                         "(label kueue.x-k8s.io/queue-name)")
    parser.add_argument("--priority-class", metavar="NAME", help="with --emit jobset: the pods' PriorityClass")
    parser.add_argument("--exclusive-topology", metavar="NODE-LABEL",
                        help="with --emit jobset: the job alone in one domain of NODE-LABEL, e.g. "
                             "cloud.google.com/gke-nodepool (annotation alpha.jobset.sigs.k8s.io/exclusive-topology)")
    parser.add_argument("--wheel", metavar="FILE.whl",
                        help="with --emit skypilot: the acceltrain wheel each host installs (default: the project in "
                             "this folder, which SkyPilot syncs)")


def _add_script_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("script", metavar="SCRIPT.py", help="the script, run as __main__")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS", help="the script's own arguments")


def _add_checkpoint_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint-dir", metavar="DIR",
                        help="train the script's fit calls resumably, checkpointing into DIR (the Nth fit into "
                             "DIR/fit-N); a notice (SIGTERM, SIGUSR1) writes a checkpoint and exits 42 (preempted, "
                             "checkpoint saved, restart me), Ctrl-C writes one and exits 130")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the newest good checkpoints in --checkpoint-dir; with none there yet, "
                             "start (an engine reruns the same command)")
    parser.add_argument("--checkpoint-every", metavar="auto|N [epochs|steps]",
                        help=f"how often to checkpoint (default: {AUTO_CHECKPOINTS})")
    parser.add_argument("--keep-checkpoints", type=int, metavar="K",
                        help="keep the newest K checkpoints of each fit (default: 2)")


def _add_ledger_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ledger", metavar="FILE.json",
                        help="also write where the run's time went (the line printed at its end) as JSON to FILE; in a "
                             "job of several processes, each writes its own, FILE.0.json, FILE.1.json ...")


# --autopilot means one thing in train, run and launch: the levers of planning/levers.py, each compiled first, for a
# step that fits no sharding. Which of them can still act depends on who builds the model, and the help says so.
AUTOPILOT_HELP = ("when a model's training step does not fit the device memory under any sharding, apply the levers "
                  "in turn, each compiled first: bfloat16 compute and rematerialisation where acceltrain builds the "
                  "model (train), then gradient accumulation, the global batch kept (a script's models, built before "
                  "their first fit, take accumulation alone and are told the others) (default); --no-autopilot stops "
                  "instead (the sharding 'auto' chooses is applied either way)")


def _add_autopilot_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--autopilot", action=argparse.BooleanOptionalAction, default=True, help=AUTOPILOT_HELP)
    parser.add_argument("--verify", type=int, metavar="N",
                        help="before training, run N steps of each model's first fit on its layout and on one device "
                             "from the same weights and batches, print the differences, and stop (exit 1) when they "
                             "exceed the tolerance")


def _checkpoint_flags(args):
    """--checkpoint-dir and its companions as one acceltrain.Checkpoints, checked (None without --checkpoint-dir)."""
    from acceltrain.options import Checkpoints

    return Checkpoints.of(args.checkpoint_dir, args.checkpoint_every, args.keep_checkpoints, args.resume)


def _settings(args, cluster=None):
    """connect()'s keywords from the flags run, launch and devices share (runtime.Settings.read)."""
    from acceltrain.runtime import Settings

    return Settings.read(args, **(cluster or {}))


def _run(args) -> int:
    _check_device_memory(args)
    from acceltrain.commands.run import run_script

    notices = preemption.notices_outside_training() if args.checkpoint_dir else contextlib.nullcontext()
    with notices:  # with checkpoints, a notice before the first step: exit 42 at once
        job = {"coordinator": args.coordinator, "num_processes": args.num_processes, "process_id": args.process_id}
        return run_script(args.script, args.script_args, settings=_settings(args, job),
                          checkpoints=_checkpoint_flags(args), autopilot=args.autopilot, verify=args.verify,
                          started=ledger.run_start(), ledger_file=args.ledger)


def _launch(args) -> int:
    if args.emit is not None:
        return _emit(args)
    emit_only = [flag for flag in ("target", "nodes", "image", "compile_cache_dir", "max_restarts", "name",
                                   "grace_period", "queue", "priority_class", "exclusive_topology", "wheel")
                 if getattr(args, flag) is not None]
    if emit_only:
        flag = emit_only[0]
        raise UsageError(f"Received --{flag.replace('_', '-')} {getattr(args, flag)} without --emit: it says what an artifact "
                         "holds. Add --emit jobset|sbatch|skypilot|ray, or leave it out to launch here.")
    if args.processes is None:
        raise UsageError("Received no --processes. Pass how many processes to start here, e.g. --processes 2, or "
                         "--emit ENGINE --target TARGET to print what a cluster runs.")
    from acceltrain.commands.launch import launch

    return launch(args.script, args.script_args, processes=args.processes, settings=_settings(args),
                  checkpoints=_checkpoint_flags(args), autopilot=args.autopilot, verify=args.verify,
                  ledger_file=args.ledger)


def _emit(args) -> int:
    from acceltrain.commands import emit

    if args.target is None:
        raise UsageError(f"Received --emit {args.emit} without --target. Pass the hardware the job runs on, e.g. "
                         "--target tpu-v5e-16, h100-8 or cpu.")
    # Every `acceltrain run` flag the user set goes into the artifact's command, once checked as `launch` checks it
    # (the folders aside: the job's are on the cluster), each value writing itself back (as_args).
    from acceltrain.layout import verify

    processes = emit.hosts(args.target, args.nodes, args.processes).processes
    settings = _settings(args)
    settings.check(processes=processes)
    _check_the_scripts_backend(args.script, args.backend, processes)
    checkpoints = emit.shared_checkpoints(args.emit, args.checkpoint_dir, args.checkpoint_every, args.keep_checkpoints)
    verify.check_steps(args.verify, processes)
    run_flags = settings.as_args()
    run_flags += ["--ledger", args.ledger] if args.ledger is not None else []
    run_flags += ["--verify", str(args.verify)] if args.verify is not None else []
    run_flags += [] if args.autopilot else ["--no-autopilot"]
    text = emit.emit(args.emit, args.target, args.script, args.script_args, name=args.name, nodes=args.nodes,
                     processes=args.processes, image=args.image, checkpoints=checkpoints,
                     compile_cache_dir=args.compile_cache_dir, max_restarts=args.max_restarts, run_flags=run_flags,
                     grace_period=args.grace_period, queue=args.queue, priority_class=args.priority_class,
                     exclusive_topology=args.exclusive_topology, wheel=args.wheel)
    if args.emit == "jobset" and args.image is None:
        log.warn(f"no --image: the JobSet names {emit.IMAGE_PLACEHOLDER}; put an image with acceltrain and your "
                 "script there (or pass --image)")
    print(text, end="")
    return 0


def _check_the_scripts_backend(script: str, backend: str | None, processes: int) -> None:
    """A script here that sets TensorFlow itself, in a job of several processes: refused as `launch` refuses it (the
    job's variables are the cluster's, not this machine's, so only the script's own forced choice is read)."""
    from pathlib import Path

    from acceltrain import script_source

    if backend is not None or processes < 2 or not Path(script).is_file():
        return
    choice = script_source.backend_choice(Path(script).read_text(errors="replace"))
    if choice is not None and choice.over(None) == "tensorflow":
        raise UsageError(f"Received {Path(script).name}, whose line {choice.line} sets its backend ({choice.said}), "
                         f"for a job of {processes} processes. A job of several processes trains on JAX only: Keras "
                         "3's fit fails under TensorFlow's MultiWorkerMirroredStrategy (keras-team/keras#20585). Where "
                         f"its code runs on JAX too, change line {choice.line} to 'jax' (check it plainly first: "
                         f"python {script}) or pass --backend jax.")


def _verb(verbs, name: str, help: str) -> argparse.ArgumentParser:
    parser = verbs.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".",
                              epilog=EXAMPLES[name], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-q", "--quiet", action="store_true", help="print results and errors only")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print details (paths, timings) and the traceback of an error")
    return parser


def _add_memory_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device-memory", metavar="SIZE",
                        help="memory of one device (e.g. 16GiB, 128MiB), overriding the hardware's; what "
                             "--distribution auto fits the model to (CPUs report none)")


def _check_device_memory(args) -> None:
    """--device-memory named as the flag it is, before anything starts."""
    if args.device_memory is not None:
        from acceltrain import sharding

        sharding.parse_bytes(args.device_memory, "--device-memory")


def _add_connect_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", help="jax (default) or tensorflow")
    parser.add_argument("--simulate-devices", type=int, metavar="N",
                        help="split this CPU into N devices to try multi-device runs")
    parser.add_argument("--distribution", default="auto",
                        help="auto (default: data parallel, or fsdp when the model does not fit one device), data, "
                             "fsdp, model or none")
    parser.add_argument("--platform", default="auto", choices=("auto", *PLATFORMS),
                        help="auto (default: TPU, else GPU, else CPU), tpu, gpu or cpu")
    parser.add_argument("--tpu", metavar="NAME", help="a TPU's name or address to connect to (tensorflow backend)")
    parser.add_argument("--precision", default="auto", choices=PRECISIONS,
                        help="Keras's dtype policy for the models built (default: auto: your own global policy if "
                             "the script sets one, else mixed_bfloat16 on TPUs and GPUs of compute capability 8.0+, "
                             "else float32); float32 keeps Keras's default everywhere")


def _add_device_data_flag(parser: argparse.ArgumentParser, default="auto") -> None:
    parser.add_argument("--device-data", default=default, choices=("auto", "off"),
                        help="auto (default, JAX): a fit's in-memory arrays kept on the devices where they fit a share "
                             "of their memory, each step sending only its batch's indices (said in one line with its "
                             "numbers); off: Keras's own input path, each batch sliced on the host and sent")


def _add_stall_timeout(parser: argparse.ArgumentParser) -> None:
    from acceltrain.watchdog import DEFAULT_STALL_TIMEOUT

    parser.add_argument("--stall-timeout", type=float, metavar="SECONDS",
                        help="end the job, showing each process's stack, when no step has finished for this long "
                             f"inside fit/evaluate/predict (default: {DEFAULT_STALL_TIMEOUT:g}; 0: off). The upper "
                             "bound: after the first steps, a shorter one follows the measured step time (max(60 s, "
                             "20 × the slowest step, or dispatch of several), counting only time this process sits "
                             "idle), and is used "
                             "where it is lower")


def _devices(args) -> int:
    _check_device_memory(args)

    with log.phase("connecting to the hardware"):  # a TPU can take a minute to answer
        runtime = _settings(args).connect(verbose=False)
    if args.json:
        print(json.dumps(runtime.describe(), indent=2))
    else:
        print(runtime)
        for topic, decision in runtime.describe()["decisions"].items():
            print(f"  {topic}: {decision}")
    return 0


def _train(args) -> int:
    from acceltrain.commands import config as config_files
    from acceltrain.commands.train import train_and_evaluate

    flags = {name: getattr(args, name) for name in config_files.fields() if getattr(args, name, None) is not None}
    config = config_files.resolve(args.config, flags)
    log.debug(f"settings: {config}")
    with preemption.notices_outside_training():  # a notice before the first step: exit 42 at once
        # The program's ledger counts from its interpreter's start; a caller's main([...]) from this call's.
        metrics = train_and_evaluate(config, started=ledger.interpreter_start() if getattr(args, "program", False) else None)
    accuracy = metrics["test_accuracy"]
    print(f"test accuracy: {accuracy:.4f}" if accuracy is not None else f"test metrics: {metrics['test_metrics']}")
    args.leave_at_once = True  # the ledger ended with the last output: nothing of the run is left to book
    return 0


def _report(args) -> int:
    from acceltrain.commands import report

    for path in report.redraw(args.dir):
        print(path)
    return 0


def _doctor(args) -> int:
    from acceltrain.commands import doctor

    if args.artifact is not None:
        checks = [doctor.Check("artifact", *doctor.check_artifact(args.artifact))]
        print(json.dumps([check.as_dict() for check in checks], indent=2) if args.json else
              doctor.format_check(checks[0]))
        return 1 if checks[0].status == doctor.FAIL else 0
    show = None if args.json else (lambda check: print(doctor.format_check(check), flush=True))
    checks = doctor.run_all(out=args.out, backend=args.backend, simulate_devices=args.simulate_devices,
                            distribution=args.distribution, platform=args.platform, tpu=args.tpu,
                            precision=args.precision, batch_size=args.batch_size, on_check=show)
    print(json.dumps([check.as_dict() for check in checks], indent=2) if args.json else doctor.summary(checks))
    return 1 if any(check.status == doctor.FAIL for check in checks) else 0


def _plan(args) -> int:
    from acceltrain.commands import plan

    return plan.run(args)


def _bench(args) -> int:
    from acceltrain.commands import bench, outputs

    outputs.check_file_folder(args.json, "--json")
    report = bench.run(bench.BenchConfig(recipe=args.recipe, backend=args.backend, simulate_devices=args.simulate_devices,
                                         epochs=args.epochs, repeats=args.repeats, samples=args.samples,
                                         batch_size=args.batch_size, checkpoints=args.checkpoints,
                                         device_data=args.device_data))
    print(bench.format_table(report))
    if args.json:
        outputs.write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
