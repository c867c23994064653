"""`acceltrain run --checkpoint-dir`: a plain script's fit stopped by SIGTERM and resumed with --resume ends
with the weights of an uninterrupted run (each run a fresh process, on 2 simulated devices)."""

import signal
import subprocess
import time

import numpy as np
import pytest

from acceltrain.training.checkpoint import Checkpoints
from tests import support

SCRIPT = support.SCRIPTS / "plain_checkpointed.py"


def _run(folder, out, *flags, script_args=(), resume=False, backend="jax"):
    return support.run_cli("run", "--backend", backend, "--simulate-devices", "2", "--checkpoint-dir", folder,
                           "--checkpoint-every", "10 steps", *(["--resume"] if resume else []), *flags, SCRIPT, out,
                           *script_args, timeout=300)


def _sigterm_once_training(folder, out, script_args=(), backend="jax"):
    """The run started, SIGTERMed once its first checkpoint is written (so it is training); its result."""
    process = subprocess.Popen(
        support.command("run", "--backend", backend, "--simulate-devices", "2", "--checkpoint-dir", folder,
                        "--checkpoint-every", "10 steps", SCRIPT, out, *script_args),
        env=support.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        # A whole checkpoint, as a resume lists them: not Orbax's unfinished folder (epoch-....orbax-checkpoint-tmp-*).
        while not Checkpoints(folder / "fit-1").list() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.poll() is None, "the run ended before it could be signalled:\n" + process.stderr.read()
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, stdout, stderr


def _weights(path):
    with np.load(path) as saved:
        return [saved[name] for name in sorted(saved.files, key=lambda n: int(n.split("_")[1]))]


def _assert_stopped_and_resumed_like_uninterrupted(tmp_path, script_args=(), epochs=3, backend="jax"):
    script_args = [*script_args, "--epochs", str(epochs)]
    whole = _run(tmp_path / "whole", tmp_path / "whole.npz", script_args=script_args, backend=backend)
    assert whole.returncode == 0, whole.stderr

    code, _, stderr = _sigterm_once_training(tmp_path / "stopped", tmp_path / "stopped.npz", script_args, backend)
    # The kill landed while it trained: the handler of the checkpointed fit took it and saved mid-run.
    assert code == 42, stderr  # preemption.EXIT_RESTART: a notice, its checkpoint saved
    assert "SIGTERM received: finishing this step and writing a checkpoint" in stderr
    assert f"Resume with the same command plus --resume (acceltrain run ... --checkpoint-dir {tmp_path / 'stopped'} " \
           f"--resume {SCRIPT}" in stderr
    assert not (tmp_path / "stopped.npz").exists()  # the script did not go on past its fit
    assert not (tmp_path / "stopped" / "fit-1" / f"epoch-{epochs:04d}-step-00000").exists()  # nor did its fit end

    # Born with other weights: only a restored checkpoint can bring it back to the same end.
    resumed = _run(tmp_path / "stopped", tmp_path / "stopped.npz", script_args=[*script_args, "--init-seed", "7"],
                   resume=True, backend=backend)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from epoch-" in resumed.stderr
    # Same mesh, same CPU: the same steps on the same batches in the same order, so bit-identical.
    for got, expected in zip(_weights(tmp_path / "stopped.npz"), _weights(tmp_path / "whole.npz"), strict=True):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.multi_device
def test_resume_on_a_missing_checkpoint_dir_starts_the_script(tmp_path):
    """An engine reruns the same command (issue 35): --resume before any checkpoint was written starts the run.
    (An empty folder takes the same path: Checkpoints.check_folder finds nothing held, Runtime.fit nothing to restore.)"""
    started = _run(tmp_path / "ckpt", tmp_path / "out.npz", script_args=["--epochs", "1"], resume=True)
    assert started.returncode == 0, started.stderr
    assert "no checkpoint in" in started.stderr and "starting from the beginning" in started.stderr
    assert (tmp_path / "out.npz").exists()


@pytest.mark.multi_device
def test_a_plain_script_stopped_by_sigterm_resumes_to_the_uninterrupted_weights(tmp_path):
    _assert_stopped_and_resumed_like_uninterrupted(tmp_path, epochs=2)


@pytest.mark.slow
@pytest.mark.tensorflow
def test_on_tensorflow_a_plain_script_stopped_by_sigterm_resumes_to_the_uninterrupted_weights(tmp_path):
    """Issue 45: on TensorFlow the checkpointed loop no longer enters the whole strategy's scope around the script's
    fits (only Keras's objects are made in it, as without checkpoints): its exact resume holds."""
    _assert_stopped_and_resumed_like_uninterrupted(tmp_path, epochs=2, backend="tensorflow")


@pytest.mark.slow
@pytest.mark.multi_device
def test_a_plain_tf_data_script_stopped_by_sigterm_resumes_to_the_uninterrupted_weights(tmp_path):
    _assert_stopped_and_resumed_like_uninterrupted(tmp_path, ["--dataset"])


@pytest.mark.multi_device
def test_a_fit_argument_exact_resume_cannot_honour_stops_the_script_before_training(tmp_path):
    run = _run(tmp_path / "checkpoints", tmp_path / "out.npz", script_args=["--steps-per-epoch", "5"])

    assert run.returncode == 2, run.stderr
    assert "Received model.fit(steps_per_epoch=5) under --checkpoint-dir" in run.stderr
    assert "Run without --checkpoint-dir" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "out.npz").exists()


# --- The flags, checked before anything starts (in this process: no framework is started) -------------

@pytest.mark.parametrize("verb", ["run", "launch"])
@pytest.mark.parametrize(
    "flags, says",
    [
        (["--checkpoint-every", "often"], "Received --checkpoint-every 'often'. Expected 'auto' (the default) or a count and a unit"),
        (["--checkpoint-every", "0 steps"], "Received --checkpoint-every '0 steps'"),
        (["--keep-checkpoints", "0"], "Received --keep-checkpoints 0. Expected a whole number of at least 1"),
        (["--resume", "--no-dir"], "Received --resume without --checkpoint-dir. Pass --checkpoint-dir DIR too"),
        (["--checkpoint-every", "5 steps", "--no-dir"], "Received --checkpoint-every without --checkpoint-dir"),
        (["--keep-checkpoints", "3", "--no-dir"], "Received --keep-checkpoints without --checkpoint-dir"),
    ],
)
def test_a_bad_checkpoint_flag_is_named_and_nothing_is_written(tmp_path, capsys, verb, flags, says):
    from acceltrain.cli import main

    folder = tmp_path / "checkpoints"
    where = [] if "--no-dir" in flags else ["--checkpoint-dir", str(folder)]
    processes = ["--processes", "2"] if verb == "launch" else []
    code = main([verb, *processes, *where, *(f for f in flags if f != "--no-dir"), str(SCRIPT), "out.npz"])

    assert code == 2 and says in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_dir_that_is_a_file_or_holds_files_without_resume_is_refused(tmp_path, capsys):
    from acceltrain.cli import main

    (tmp_path / "a_file").write_text("")
    (tmp_path / "used" / "fit-1").mkdir(parents=True)

    assert main(["run", "--checkpoint-dir", str(tmp_path / "a_file"), str(SCRIPT), "out.npz"]) == 2
    assert f"Received --checkpoint-dir '{tmp_path / 'a_file'}', which is a file" in capsys.readouterr().err
    assert main(["run", "--checkpoint-dir", str(tmp_path / "used"), str(SCRIPT), "out.npz"]) == 2
    assert "which already holds files (fit-1). Pass --resume to continue" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a_file", "fit-1", "used"]


def test_launch_passes_the_checkpoint_flags_on_to_each_process():
    from acceltrain import Checkpoints

    assert Checkpoints.of("ckpt", "20 steps", 3, resume=True).as_args() == [
        "--checkpoint-every", "20 steps", "--keep-checkpoints", "3", "--checkpoint-dir", "ckpt", "--resume"]
    assert Checkpoints.of("ckpt").as_args() == ["--checkpoint-dir", "ckpt"]  # the defaults left out


# --- The script's fit arguments, as Runtime.fit's checkpointed path takes them (numpy only) -------------

def _arrays(n=120):
    return np.arange(n, dtype="float32")[:, None], np.arange(n) % 4


@pytest.mark.parametrize(
    "given, says",
    [
        ({"x": iter([])}, "Received model.fit(x of type list_iterator) under --checkpoint-dir"),
        ({"steps_per_epoch": 10}, "Received model.fit(steps_per_epoch=10)"),
        ({"initial_epoch": 2}, "Received model.fit(initial_epoch=2)"),
        ({"shuffle": "batch"}, "Received model.fit(shuffle='batch')"),
    ],
)
def test_what_exact_resume_cannot_honour_is_refused_with_the_way_out(given, says):
    from acceltrain.checks import resumable_arguments
    from acceltrain.errors import UsageError, cli_names

    x, y = _arrays()
    with pytest.raises(UsageError, match="Run without --checkpoint-dir") as error, cli_names():
        resumable_arguments({"x": x, "y": y, **given})
    assert says in str(error.value)
    with pytest.raises(UsageError, match="Leave out checkpoint_dir") as error:  # Runtime.fit's
        resumable_arguments({"x": x, "y": y, **given})
    assert says.replace("model.fit", "Runtime.fit").replace(" under --checkpoint-dir", "") in str(error.value)


def test_kerass_backup_and_restore_is_refused_beside_the_checkpoints_that_do_its_work(tmp_path):
    """Under the checkpointed loop (one Keras fit an epoch) BackupAndRestore restored its backup at each epoch's fit,
    over the resumed checkpoint: epochs ran twice (checks._WHY's note). Refused as the other arguments are, which
    stops a script before training (the test above, end to end)."""
    import keras

    from acceltrain.checks import resumable_arguments
    from acceltrain.errors import UsageError, cli_names

    class Backup(keras.callbacks.BackupAndRestore):  # a class made from it is the same callback
        pass

    x, y = _arrays()
    backup = str(tmp_path / "backup")
    for callback in (keras.callbacks.BackupAndRestore(backup), Backup(backup)):
        callbacks = [keras.callbacks.CSVLogger(str(tmp_path / "log.csv")), callback]
        with pytest.raises(UsageError) as error, cli_names():
            resumable_arguments({"x": x, "y": y, "callbacks": callbacks})
        assert str(error.value).startswith(f"Received model.fit(callbacks=[..., BackupAndRestore(backup_dir="
                                           f"{backup!r}), ...]) under --checkpoint-dir, which cannot resume it exactly")
        assert "leave it out of the callbacks and pass --resume" in str(error.value)
        with pytest.raises(UsageError, match="pass resume=True to continue. Leave out checkpoint_dir"):
            resumable_arguments({"x": x, "y": y, "callbacks": callbacks})
    kept = [keras.callbacks.CSVLogger(str(tmp_path / "log.csv")), keras.callbacks.TerminateOnNaN()]
    assert resumable_arguments({"x": x, "y": y, "callbacks": kept})["callbacks"] == kept  # Keras's others pass


def test_the_scripts_own_arguments_are_kept_for_the_checkpointed_loop():
    from acceltrain.checks import resumable_arguments

    x, y = _arrays()
    weights = np.ones(120)
    got = resumable_arguments({"x": x, "y": y, "epochs": 4, "verbose": 2, "shuffle": False, "class_weight": {0: 2.0},
                               "sample_weight": weights, "validation_split": 0.25, "validation_freq": 2,
                               "callbacks": ("the script's",)})

    assert got["x"] is x and got["y"] is y and got["sample_weight"] is weights  # the loop splits and orders them
    assert got["batch_size"] == 32  # Keras's default, made explicit
    assert {k: got[k] for k in ("epochs", "verbose", "shuffle", "class_weight", "validation_split", "validation_freq",
                                "callbacks")} == {
        "epochs": 4, "verbose": 2, "shuffle": False, "class_weight": {0: 2.0}, "validation_split": 0.25,
        "validation_freq": 2, "callbacks": ["the script's"]}


def test_the_resume_hint_says_the_command_plus_resume_or_as_it_is(tmp_path):
    from acceltrain import Checkpoints
    from acceltrain.commands.run_checkpoints import resume_hint

    fresh = resume_hint(Checkpoints(tmp_path, every="10 steps", keep=3), "acceltrain run ... --resume s.py")
    assert fresh == "the same command plus --resume (acceltrain run ... --resume s.py)"
    resumed = resume_hint(Checkpoints(tmp_path, resume=True), "acceltrain run ... --resume s.py")
    assert resumed == "the same command, as it is (acceltrain run ... --resume s.py)"


def test_auto_in_a_job_of_two_processes_times_the_steps_and_every_process_takes_process_0s_choice(tmp_path):
    """--checkpoint-every auto (the default) under launch: each process times its first epoch's steps and takes
    process 0's choice, a collective made mid-fit; the job neither deadlocks nor splits, and checkpoints at the
    epochs' ends (these are short)."""
    folder = tmp_path / "ckpt"
    job = support.run_cli("launch", "--processes", "2", "--checkpoint-dir", folder, "--keep-checkpoints", "5", SCRIPT,
                          tmp_path / "out.npz", "--epochs", "2", timeout=300)
    assert job.returncode == 0, job.stderr
    assert sorted(p.name for p in (folder / "fit-1").iterdir() if p.name.startswith("epoch-")) == [
        "epoch-0001-step-00000", "epoch-0002-step-00000"]
