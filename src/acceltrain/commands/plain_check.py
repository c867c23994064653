"""Whose error is it: a script's failed Keras call judged by the same script run plainly, in a fresh process.

    verdict = plain_check.judge(script, argv, "jax", "fit", 1, error, timeout=120)

The half-failed process cannot judge: its variables, Keras's compiled functions and the distribution are what
failed, so the same call run again there fails for reasons of its own (issue 33). Instead this module runs as
`python -m acceltrain.commands.plain_check`: Keras loaded on the backend the run used (before the script, so a
script that sets another one runs on the same backend as under acceltrain), then the script as `__main__` with
its own argv, no acceltrain hook, until the failed call (the script's N-th fit, say) returns or raises; the process
then ends at once, so nothing after that call runs twice. The answer comes back as JSON in a file.
"""

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CALLS = ("fit", "evaluate", "predict")


@dataclass(frozen=True)
class Verdict:
    """What the plain rerun showed: outcome is "passed" (the call returned), "failed" (it raised `error_type`:
    `message`), "not reached" (the script ended, or raised `error_type` elsewhere, before making the call) or
    "timed out"."""

    outcome: str
    error_type: str = ""
    message: str = ""


def command(script: Path, argv, backend: str, call: str | None = None, nth: int = 0, result: Path | None = None) -> list:
    """The plain rerun's command: this interpreter, this module, the script and its arguments."""
    stop = ["--call", call, "--nth", str(nth), "--result", str(result)] if call is not None else []
    return [sys.executable, "-m", "acceltrain.commands.plain_check", "--backend", backend, *stop, "--",
            str(script), *argv]


def shown(script: Path, argv, backend: str) -> str:
    """The command a user types to run the script plainly on `backend`: `KERAS_BACKEND=B python SCRIPT ARGS`, or,
    where the script sets another backend itself, Keras loaded on B before it (the variable alone would not hold)."""
    from acceltrain import script_source

    try:
        choice = script_source.backend_choice(script.read_text(errors="replace"))
    except OSError:  # gone since: what it said cannot matter
        choice = None
    if choice is None or choice.over(backend) == backend:
        return shlex.join([f"KERAS_BACKEND={backend}", sys.executable, str(script), *argv])
    return shlex.join(command(script, argv, backend))


def judge(script: Path, argv, backend: str, call: str, nth: int, timeout: float, env: dict) -> Verdict:
    """Run the script plainly in a fresh process (`env`: the user's environment) until its `nth` `call` returns or
    raises, for `timeout` seconds at most; its output is dropped (the user saw the script's own already)."""
    with tempfile.TemporaryDirectory(prefix="acceltrain-plain-") as folder:
        result = Path(folder) / "verdict.json"
        child = subprocess.Popen(command(script, argv, backend, call, nth, result), env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=0)
        try:
            child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return Verdict("timed out")
        finally:
            _end_group(child)  # what the plain run started (a data loader's workers) ends with it
        if not result.is_file():
            return Verdict("not reached", "", "the plain run ended without saying (killed?)")
        return Verdict(**json.loads(result.read_text()))


def _end_group(child) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)  # the child leads its own group (process_group=0)
    except (ProcessLookupError, PermissionError):
        pass  # gone already
    child.wait()


def main(args=None) -> int:
    """The plain run itself (in the fresh process)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m acceltrain.commands.plain_check",
                                     description="Run a Keras script plainly, Keras loaded on BACKEND first.")
    parser.add_argument("--backend", required=True)
    parser.add_argument("--call", choices=CALLS)
    parser.add_argument("--nth", type=int, default=1)
    parser.add_argument("--result")
    parser.add_argument("script")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    options = parser.parse_args(args)
    os.environ["KERAS_BACKEND"] = options.backend
    import runpy

    import keras

    if options.call is not None:
        _stop_at(keras.Model, options.call, options.nth, Path(options.result))
    sys.argv = [options.script, *options.argv]
    sys.path.insert(0, str(Path(options.script).resolve().parent))
    if options.result is None:  # the check a user runs: the script's own exit and traceback
        runpy.run_path(options.script, run_name="__main__")
        return 0
    try:
        runpy.run_path(options.script, run_name="__main__")
    except SystemExit:
        pass
    except Exception as error:  # noqa: BLE001  (raised outside the call: the call was not reached)
        _answer(options.result, "not reached", error)
    _answer(options.result, "not reached")
    return 0


def _stop_at(model_class, name: str, nth: int, result: Path) -> None:
    """model_class.NAME replaced by one that counts the script's outermost calls and, at the `nth`, writes how it
    ended and ends the process (os._exit: no atexit, no Keras thread to wait for)."""
    keras_own = getattr(model_class, name)
    depth, count = [0], [0]

    def stopping(model, *args, **kwargs):
        outermost = depth[0] == 0
        count[0] += outermost
        depth[0] += 1
        try:
            returned = keras_own(model, *args, **kwargs)
        except Exception as error:  # noqa: BLE001  (any error is the answer)
            if outermost and count[0] == nth:
                _answer(result, "failed", error)
            raise
        finally:
            depth[0] -= 1
        if outermost and count[0] == nth:
            _answer(result, "passed")
        return returned

    setattr(model_class, name, stopping)


def _answer(result, outcome: str, error: BaseException | None = None) -> None:
    if result is None:
        return
    message = str(error).strip().splitlines()[0][:300] if error is not None and str(error).strip() else ""
    Path(result).write_text(json.dumps({"outcome": outcome, "error_type": type(error).__name__ if error else "",
                                        "message": message}))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
