"""`acceltrain launch --emit`: each artifact pinned as text (golden/), valid for its engine, and every wrong
input refused with its fix. Set ACCELTRAIN_UPDATE_GOLDEN=1 to rewrite the golden files, then review the diff."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from acceltrain.commands import emit
from acceltrain.commands.emit import job as emit_job
from tests import support

GOLDEN = Path(__file__).parent / "golden"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def in_a_project(tmp_path, monkeypatch):
    """Every emit here runs in a folder holding a project (what SkyPilot's `setup` installs) and the script."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "acceltrain"\n')
    (tmp_path / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
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
    assert rule["onExitCodes"]["values"] == [42, *range(128, 256)]  # xpk's get_restart_exit_codes, less 127
    assert document["spec"]["failurePolicy"]["rules"][0]["onJobFailureReasons"] == ["PodFailurePolicy"]
    check, run = container["command"][-1].splitlines()  # acceltrain there (else exit 127, said), then the run
    assert check.startswith("command -v acceltrain") and "exit 127" in check
    assert "acceltrain run --checkpoint-dir /shared/checkpoints --resume train.py --epochs 3" == run
    assert {"name": "JAX_COMPILATION_CACHE_DIR", "value": "/shared/compile-cache"} in container["env"]


@pytest.mark.parametrize("target, hosts, chips, topology", [
    ("tpu-v5e-1", 1, 1, "1x1"), ("tpu-v5e-4", 1, 4, "2x2"), ("tpu-v5e-8", 1, 8, "2x4"), ("tpu-v5e-16", 4, 4, "4x4"),
    ("v5litepod-32", 8, 4, "4x8"), ("tpu-v6e-32", 8, 4, "4x8"), ("tpu-v6e-8", 1, 8, "2x4"), ("tpu-v4-8", 1, 4, "2x2x1"),
    ("tpu-v4-16", 2, 4, "2x2x2"), ("tpu-v5p-32", 4, 4, "2x2x4"), ("tpu-v3-8", 1, 4, "2x2"),
])
def test_a_slices_hosts_and_chips(target, hosts, chips, topology):
    where = emit_job.hosts(target)
    assert (where.count, where.chips_per_host, where.topology) == (hosts, chips, topology)


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


def skypilot_python() -> str | None:
    """SkyPilot's own Python: ACCELTRAIN_SKYPILOT_PYTHON, else .venv-sky (which .ci/run makes: SkyPilot 0.14.1 pins
    packages of its own, so it has a venv of its own)."""
    given = os.environ.get("ACCELTRAIN_SKYPILOT_PYTHON") or str(ROOT / ".venv-sky" / "bin" / "python")
    return given if Path(given).exists() else None


SKY_READS = """
import json, sys
import sky
for path in sys.argv[1:]:
    task = sky.Task.from_yaml(path)
    (resources,) = task.resources
    print(json.dumps({"nodes": task.num_nodes, "recovery": resources.job_recovery, "setup": task.setup,
                      "run": task.run, "workdir": task.workdir, "files": task.file_mounts or {},
                      "buckets": sorted(task.storage_mounts or {})}))
"""


def test_skypilot_parses_every_task_acceltrain_emits(tmp_path, capsys):
    """SkyPilot's own parser (sky.Task.from_yaml, offline) on a task of each target kind and with --wheel: it
    reads the recovery on 42, the install from the synced folder or the wheel, the script relative to it."""
    python = skypilot_python()
    if python is None:
        pytest.skip("SkyPilot is not installed: .ci/run makes .venv-sky (python -m venv .venv-sky && "
                    ".venv-sky/bin/pip install skypilot==0.14.1), or set ACCELTRAIN_SKYPILOT_PYTHON")
    wheel = tmp_path / "dist" / "acceltrain-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"")
    commands = {"tpu-v6e-32": [], "h100-8": ["--nodes", "2"], "cpu": ["--nodes", "2", "--simulate-devices", "2"],
                "wheel": ["--wheel", str(wheel), "--nodes", "2"]}
    paths = []
    for name, flags in commands.items():
        target = "cpu" if name in ("cpu", "wheel") else name
        code, out, err = _launch(capsys, " ".join(["--emit skypilot --target", target, *flags, "train.py --epochs 3"]))
        assert code == 0, err
        paths.append(tmp_path / f"{name}.yaml")
        paths[-1].write_text(out)
    read = subprocess.run([python, "-c", SKY_READS, *map(str, paths)], capture_output=True, text=True, timeout=300)
    assert read.returncode == 0, read.stderr
    import json

    tpu, gpu, cpu, wheeled = (json.loads(line) for line in read.stdout.splitlines() if line.startswith("{"))
    for task in (tpu, gpu, cpu, wheeled):
        assert task["recovery"]["recover_on_exit_codes"] == [42] and task["workdir"] == "."
        assert "acceltrain run" in task["run"] and task["run"].rstrip().endswith(" train.py --epochs 3")
        assert task["buckets"] == ["/shared"]
    assert (tpu["nodes"], gpu["nodes"], cpu["nodes"]) == (1, 2, 2)
    assert (tpu["setup"], gpu["setup"], cpu["setup"]) == ("pip install '.[tpu]'\n", "pip install '.[gpu]'\n",
                                                          "pip install .\n")
    mounted = "/tmp/acceltrain-wheel/acceltrain-0.1.0-py3-none-any.whl"
    assert wheeled["setup"] == f"pip install {mounted}\n" and wheeled["files"] == {mounted: str(wheel)}


@pytest.mark.parametrize("flags, says", [
    ("--checkpoint-every bogus", "--checkpoint-every 'bogus'"),
    ("--keep-checkpoints 0", "--keep-checkpoints"),
    ("--device-memory 12QB", "--device-memory"),
    ("--stall-timeout -1", "--stall-timeout=-1.0"),
    ("--distribution bogus", "distribution='bogus'"),
    ("--simulate-devices 0", "--simulate-devices"),
    ("--verify 0", "--verify"),
    ("--verify 3", "--verify 3 for a job of 2 processes"),
    ("--backend pytorch", "'pytorch'"),
    ("--backend tensorflow", "JAX only"),
])
@pytest.mark.parametrize("engine", ["jobset", "sbatch", "skypilot", "ray"])
def test_emit_refuses_every_flag_launch_refuses(engine, flags, says, capsys, tmp_path):
    """One check for both paths (runtime.Settings.check, acceltrain.Checkpoints, verify.check_steps): a flag
    `launch` refuses before its processes start is refused before the artifact is written, not on the cluster."""
    (tmp_path / "ckpt").mkdir()
    code, out, err = _launch(capsys, f"--processes 2 --checkpoint-dir ckpt {flags} train.py")
    assert code == 2 and says in err and "Traceback" not in err, ("launch", err)
    target = "--target cpu --processes 1 --nodes 2" if engine == "skypilot" else "--target cpu --processes 2"
    code, out, err = _launch(capsys, f"--emit {engine} {target} --checkpoint-dir /shared/ckpt {flags} train.py")
    assert code == 2 and out == "" and says in err and "Traceback" not in err, (engine, err)


@pytest.mark.parametrize("engine", ["jobset", "sbatch", "skypilot", "ray"])
def test_emit_refuses_a_script_that_sets_tensorflow_in_a_job_of_several_processes(engine, capsys, tmp_path):
    """As `launch` refuses it (naming the script's line), before the artifact is written; one process is fine."""
    (tmp_path / "train.py").write_text("import os\nos.environ['KERAS_BACKEND'] = 'tensorflow'\nimport keras\n")
    code, out, err = _launch(capsys, "--processes 2 train.py")
    assert code == 2 and "whose line 2 sets its backend" in err, ("launch", err)
    code, out, err = _launch(capsys, f"--emit {engine} --target h100-8 --nodes 2 train.py")
    assert code == 2 and out == "" and "whose line 2 sets its backend" in err and "JAX only" in err, err
    code, out, err = _launch(capsys, f"--emit {engine} --target h100-8 train.py")
    assert code == 0, err


def test_a_jobsets_grace_queue_priority_and_placement_are_set_said_and_pass_the_crd(capsys):
    import yaml

    from acceltrain.commands.emit import jobset

    code, out, err = _launch(capsys, "--emit jobset --target tpu-v5e-16 --image gcr.io/me/t:1 --grace-period 120 "
                                     "--queue team-a --priority-class high-priority --exclusive-topology "
                                     "cloud.google.com/gke-nodepool train.py")
    assert code == 0, err
    assert jobset.check(out) == []  # the JobSet CRD's schema, then acceltrain's own checks
    document = yaml.safe_load(out)
    pod = document["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert (pod["terminationGracePeriodSeconds"], pod["priorityClassName"]) == (120, "high-priority")
    assert document["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert document["metadata"]["annotations"] == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
    assert "within the pods' grace: 120 s (--grace-period)" in out
    # The CRD's schema refuses what Kubernetes would: a grace that is not a number, a priority class not a string.
    broken = out.replace("terminationGracePeriodSeconds: 120", "terminationGracePeriodSeconds: soon")
    assert any("terminationGracePeriodSeconds" in problem for problem in jobset.check(broken))
    code, out, err = _launch(capsys, "--emit jobset --target h100-8 train.py")
    assert "Kubernetes's default 30 s" in out and "terminationGracePeriodSeconds" not in out


@pytest.mark.parametrize("checkpoint_seconds, checkpoints, grace, says", [
    (24.0, 2, 46, "46 s, sized from run.json: a checkpoint took 12.0 s (2 measured): 3 × it + 10 s = 46 s"),
    (0.3, 3, 30, "30 s, sized from run.json: a checkpoint took 0.1 s (3 measured): 3 × it + 10 s = 11 s ≤ 30 s → Kubernetes's default"),
])
def test_a_jobsets_grace_is_sized_from_a_runs_measured_checkpoints(checkpoint_seconds, checkpoints, grace, says,
                                                                   capsys, tmp_path):
    """--grace-period FILE.json: the ledger `acceltrain run --ledger` writes (ledger.Ledger.as_json), its checkpoint
    seconds and count; the header says the grace and how it was sized."""
    import json

    import yaml

    from acceltrain import ledger

    parts = dict.fromkeys(ledger.PARTS, 0.0) | {"checkpoint": checkpoint_seconds, "device_steps": 50.0}
    record = ledger.Ledger(60.0, parts, 0.0, 60.0, {"checkpoints": checkpoints}).as_json()
    (tmp_path / "run.json").write_text(json.dumps(record))
    code, out, err = _launch(capsys, "--emit jobset --target h100-8 --grace-period run.json train.py")
    assert code == 0, err
    pod = yaml.safe_load(out)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == grace
    assert f"within the pods' grace: {says}." in out, out.splitlines()[:4]


@pytest.mark.parametrize("command, says", [
    ("--emit jobset --target h100-8 --grace-period 0 train.py", "--grace-period 0"),
    ("--emit jobset --target h100-8 --grace-period missing.json train.py", "--grace-period 'missing.json'"),
    ("--emit jobset --target h100-8 --queue 'team a' train.py", "--queue 'team a'"),
    ("--emit jobset --target h100-8 --priority-class High train.py", "--priority-class 'High'"),
    ("--emit jobset --target h100-8 --exclusive-topology 'a b' train.py", "--exclusive-topology 'a b'"),
    ("--emit sbatch --target h100-8 --queue team-a train.py", "--emit jobset only"),
    ("--emit skypilot --target h100-8 --image me/t:1 train.py", "--emit jobset only"),
    ("--emit jobset --target h100-8 --wheel x.whl train.py", "--emit skypilot only"),
    ("--emit skypilot --target h100-8 --wheel nothing.whl train.py", "not an acceltrain wheel"),
    ("--emit skypilot --target h100-8 /elsewhere/train.py", "outside this folder"),
    ("--emit skypilot --target h100-8 ../train.py", "outside this folder"),
    ("--emit jobset --target h100-8 ../train.py", "the image must hold as its working folder"),
    ("--grace-period 60 train.py", "without --emit"),
])
def test_the_engines_own_settings_are_refused_with_their_fix(command, says, capsys):
    code, out, err = _launch(capsys, command)
    assert code == 2 and out == "" and says in err and "Traceback" not in err, err


def test_skypilot_without_a_project_or_wheel_is_refused_and_the_script_is_named_relative(capsys, tmp_path):
    (tmp_path / "pyproject.toml").unlink()
    code, out, err = _launch(capsys, "--emit skypilot --target cpu train.py")
    assert code == 2 and "holds no Python project" in err and "--wheel" in err, err
    (tmp_path / "setup.py").write_text("")
    (tmp_path / "jobs").mkdir()
    code, out, err = _launch(capsys, f"--emit skypilot --target cpu {tmp_path / 'jobs' / 'train.py'}")
    assert code == 0, err
    assert "pip install .\n" in out and "--resume jobs/train.py\n" in out and str(tmp_path) not in out
    code, out, err = _launch(capsys, "--emit jobset --target cpu /app/train.py")  # the image's own path
    assert code == 0 and "--resume /app/train.py" in out, err


@pytest.mark.parametrize("engine", ["jobset", "sbatch", "skypilot"])
def test_a_host_without_acceltrain_fails_once_with_a_line_not_restarted(engine, capsys, tmp_path):
    """The artifact's own command, run by bash where no `acceltrain` is on PATH: exit 127 and one line saying so;
    127 is not among the codes its engine restarts on."""
    import yaml

    code, out, err = _launch(capsys, f"--emit {engine} --target h100-8 --nodes 2 train.py")
    assert code == 0, err
    if engine == "jobset":
        document = yaml.safe_load(out)
        job = document["spec"]["replicatedJobs"][0]["template"]["spec"]
        command = job["template"]["spec"]["containers"][0]["command"]
        restarted = job["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"]  # NotIn: these restart
        assert 127 not in restarted and {42, 137, 143} <= set(restarted)
    elif engine == "skypilot":
        task = yaml.safe_load(out)
        command = ["bash", "-c", task["run"]]
        assert task["resources"]["job_recovery"]["recover_on_exit_codes"] == [42]
    else:
        command = ["bash", "-c", out]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "SLURM_SUBMIT_DIR": str(tmp_path)})
    assert done.returncode == 127, (done.returncode, done.stderr)
    assert done.stderr.startswith("acceltrain: error: no acceltrain command on ") and len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize("step_exit, requeued", [(42, True), (127, False), (137, False), (1, False), (0, False)])
def test_the_sbatch_script_requeues_itself_on_42_only(step_exit, requeued, capsys, tmp_path):
    """The script's own tail, run by bash with a stand-in srun (exits `step_exit`) and scontrol (notes the call):
    Slurm counts no restarts, so only a checkpoint saved on a notice (42) requeues the job."""
    code, out, err = _launch(capsys, "--emit sbatch --target cpu --processes 2 train.py")
    assert code == 0, err
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, body in (("acceltrain", "exit 0"), ("srun", f"exit {step_exit}"),
                       ("scontrol", f'echo "$@" > {tmp_path}/scontrol; exit 1')):  # 1: the script skips its sleep
        (bin_ / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_ / name).chmod(0o755)
    done = subprocess.run(["bash", "-c", out], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={"PATH": f"{bin_}:/usr/bin:/bin", "SLURM_SUBMIT_DIR": str(tmp_path),
                               "SLURM_JOB_ID": "7"})
    assert done.returncode == step_exit, done.stderr
    assert (tmp_path / "scontrol").exists() == requeued
    if requeued:
        assert (tmp_path / "scontrol").read_text().split() == ["requeue", "7"]


def _launch(capsys, command: str) -> tuple[int, str, str]:
    """`acceltrain launch COMMAND` in this process (no framework starts): exit code, stdout, stderr."""
    import shlex

    from acceltrain import cli

    code = cli.main(["launch", *shlex.split(command)])
    out, err = capsys.readouterr()
    return code, out, err
