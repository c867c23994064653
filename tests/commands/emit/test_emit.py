"""`acceltrain launch --emit`: each artifact pinned as text (golden/), valid for its engine, and every wrong
input refused with its fix. Set ACCELTRAIN_UPDATE_GOLDEN=1 to rewrite the golden files, then review the diff."""

import os
from pathlib import Path

import pytest

from acceltrain.commands import emit
from acceltrain.commands.emit import job as emit_job
from tests import support

GOLDEN = Path(__file__).parent / "golden"
# (golden file, the command after `acceltrain launch`)
CASES = [
    ("jobset-tpu-v5e-16.yaml", "--emit jobset --target tpu-v5e-16 train.py --epochs 3"),
    ("jobset-h100-8-nodes-2.yaml", "--emit jobset --target h100-8 --nodes 2 --image gcr.io/me/train:1 "
                                   "--max-restarts 3 --name mnist --backend jax --platform gpu --stall-timeout 600 "
                                   "--device-memory 70GiB --ledger /shared/ledger.json --no-autopilot train.py"),
    ("sbatch-h100-8-nodes-2.sh", "--emit sbatch --target h100-8 --nodes 2 train.py --epochs 3"),
    ("sbatch-cpu-processes-2.sh", "--emit sbatch --target cpu --processes 2 --checkpoint-dir /shared/ckpt "
                                  "--checkpoint-every '1 epochs' train.py"),
    ("skypilot-tpu-v6e-32.yaml", "--emit skypilot --target tpu-v6e-32 train.py --epochs 3"),
    ("skypilot-h100-8-nodes-2.yaml", "--emit skypilot --target h100-8 --nodes 2 --compile-cache-dir /shared/xla "
                                     "--distribution fsdp --precision float32 --keep-checkpoints 3 train.py"),
]


@pytest.mark.parametrize("golden, command", CASES, ids=[case[0] for case in CASES])
def test_the_artifact_is_its_golden_file(golden, command, capsys):
    code, out, err = _launch(capsys, command)
    assert code == 0, err
    path = GOLDEN / golden
    if os.environ.get("ACCELTRAIN_UPDATE_GOLDEN") == "1":
        path.write_text(out)
    assert out == path.read_text(), f"{golden} changed: review, then rerun with ACCELTRAIN_UPDATE_GOLDEN=1"


@pytest.mark.parametrize("golden", [case[0] for case in CASES])
def test_each_golden_file_passes_its_engines_checks(golden):
    engine, problems = emit.check_artifact(GOLDEN / golden)
    assert engine == golden.split("-")[0]
    placeholder = [f"image is still {emit_job.IMAGE_PLACEHOLDER}" in problem for problem in problems]
    assert all(placeholder), problems  # the only complaint: an image to fill in, where none was given


def test_the_issues_jobset_runs_the_script_on_4_hosts_of_4_chips_restarting_on_42():
    import yaml

    document = yaml.safe_load((GOLDEN / "jobset-tpu-v5e-16.yaml").read_text())
    (slice_,) = document["spec"]["replicatedJobs"]
    job = slice_["template"]["spec"]
    pod = job["template"]["spec"]
    (container,) = pod["containers"]
    assert job["parallelism"] == job["completions"] == 4 and slice_["replicas"] == 1
    assert container["resources"]["limits"] == {"google.com/tpu": 4}
    assert pod["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                                   "cloud.google.com/gke-tpu-topology": "4x4"}
    (rule,) = job["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["operator"] == "NotIn"
    assert rule["onExitCodes"]["values"] == [42, *range(127, 256)]  # xpk's get_restart_exit_codes
    assert document["spec"]["failurePolicy"]["rules"][0]["onJobFailureReasons"] == ["PodFailurePolicy"]
    assert "acceltrain run --checkpoint-dir /shared/checkpoints --resume train.py --epochs 3" == container["command"][-1]
    assert {"name": "JAX_COMPILATION_CACHE_DIR", "value": "/shared/compile-cache"} in container["env"]


@pytest.mark.parametrize("target, hosts, chips, topology", [
    ("tpu-v5e-1", 1, 1, "1x1"), ("tpu-v5e-4", 1, 4, "2x2"), ("tpu-v5e-8", 1, 8, "2x4"), ("tpu-v5e-16", 4, 4, "4x4"),
    ("v5litepod-32", 8, 4, "4x8"), ("tpu-v6e-32", 8, 4, "4x8"), ("tpu-v6e-8", 1, 8, "2x4"), ("tpu-v4-8", 1, 4, "2x2x1"),
    ("tpu-v4-16", 2, 4, "2x2x2"), ("tpu-v5p-32", 4, 4, "2x2x4"), ("tpu-v3-8", 1, 4, "2x2"),
])
def test_a_slices_hosts_and_chips(target, hosts, chips, topology):
    layout = emit_job.layout(target)
    assert (layout.hosts, layout.chips_per_host, layout.topology) == (hosts, chips, topology)


def test_a_jobset_the_schema_refuses_is_named_where():
    text = (GOLDEN / "jobset-tpu-v5e-16.yaml").read_text()
    for broken, says in [(text.replace("parallelism: 4", "parallelism: four"), "parallelism: 'four' is not of type"),
                         (text.replace("action: FailJobSet", "action: Explode"), "'Explode' is not one of"),
                         (text.replace("operator: NotIn", "operator: In"), "spares exit code 42"),
                         (text.replace("completions: 4", "completions: 2"), "parallelism 4 and completions 2 differ")]:
        from acceltrain.commands.emit import jobset

        assert any(says in problem for problem in jobset.check(broken)), says


def test_an_sbatch_script_without_the_requeue_or_srun_is_named():
    from acceltrain.commands.emit import sbatch

    text = (GOLDEN / "sbatch-h100-8-nodes-2.sh").read_text()
    assert sbatch.check(text) == []
    assert any("--requeue" in p for p in sbatch.check(text.replace("#SBATCH --requeue\n", "")))
    assert any("srun" in p for p in sbatch.check(text.replace("srun --kill-on-bad-exit=1 ", "")))
    assert any("batch shell only" in p for p in sbatch.check(text.replace("--signal=TERM@", "--signal=B:TERM@")))
    without_ids = "".join(line for line in text.splitlines(keepends=True) if "JAX_LOCAL_DEVICE_IDS" not in line)
    assert any("only its SLURM_LOCALID's GPU" in p for p in sbatch.check(without_ids))


@pytest.mark.parametrize("command, says", [
    ("--emit kubernetes --target tpu-v5e-16 t.py", "Valid: jobset, sbatch, skypilot"),
    ("--emit jobset t.py", "without --target"),
    ("--emit jobset --target tpu-v5e-12 t.py", "tpu-v5e-16"),
    ("--emit jobset --target tpu-v3-8 t.py", "Cloud TPU VMs only"),
    ("--emit jobset --target tpu-v5e-2 t.py", "no v5e node of 2 chips"),
    ("--emit sbatch --target tpu-v5e-16 t.py", "--emit jobset"),
    ("--emit jobset --target tpu-v5e-16 --nodes 2 t.py", "bigger slice"),
    ("--emit sbatch --target h100-8 --processes 8 t.py", "one process a host"),
    ("--emit sbatch --target cpu --nodes 0 t.py", "--nodes 0"),
    ("--emit jobset --target h100-8 --max-restarts -1 t.py", "--max-restarts -1"),
    ("--emit jobset --target h100-8 --name My_Job t.py", "--name 'My_Job'"),
    ("--emit jobset --target here t.py", "runs elsewhere"),
    ("--target h100-8 t.py", "--target h100-8 without --emit"),
    ("t.py", "no --processes"),
])
def test_a_wrong_emit_is_refused_with_its_fix(command, says, capsys):
    code, out, err = _launch(capsys, command)
    assert code == 2 and out == "", (out, err)
    assert says in err and "Traceback" not in err


def test_doctor_checks_an_artifact(tmp_path):
    edited = tmp_path / "job.yaml"
    edited.write_text((GOLDEN / "jobset-h100-8-nodes-2.yaml").read_text())
    done = support.run_cli("doctor", "--artifact", str(edited), timeout=60)
    assert done.returncode == 0 and "passes the JobSet CRD's schema" in done.stdout, done.stdout + done.stderr
    edited.write_text(edited.read_text().replace("replicas: 1", "replicas: one"))
    done = support.run_cli("doctor", "--artifact", str(edited), timeout=60)
    assert done.returncode == 1 and "replicas: 'one' is not of type 'integer'" in done.stdout, done.stdout
    done = support.run_cli("doctor", "--artifact", str(tmp_path / "missing.yaml"), timeout=60)
    assert done.returncode == 2 and "not a file" in done.stderr
    (tmp_path / "notes.txt").write_text("hello\n")
    done = support.run_cli("doctor", "--artifact", str(tmp_path / "notes.txt"), timeout=60)
    assert done.returncode == 2 and "none of jobset, sbatch, skypilot" in done.stderr


def test_skypilot_reads_the_task_with_its_own_parser():
    sky = pytest.importorskip("sky", reason="SkyPilot is not installed here (pip install skypilot)")
    import yaml

    for golden in ("skypilot-tpu-v6e-32.yaml", "skypilot-h100-8-nodes-2.yaml"):
        task = sky.Task.from_yaml_config(yaml.safe_load((GOLDEN / golden).read_text()))
        assert "acceltrain run" in task.run


def _launch(capsys, command: str) -> tuple[int, str, str]:
    """`acceltrain launch COMMAND` in this process (no framework starts): exit code, stdout, stderr."""
    import shlex

    from acceltrain import cli

    code = cli.main(["launch", *shlex.split(command)])
    out, err = capsys.readouterr()
    return code, out, err
