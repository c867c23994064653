import json
import sys

import pytest
from tests.support import run_cli

from acceltrain.commands import doctor
from acceltrain.commands.doctor import FAIL, OK, WARN

# --- Each check on this machine, and on a broken one it is handed ---------------------------------


def test_python_and_versions_pass_here_and_fail_on_old_or_mismatched_ones():
    assert doctor.check_python()[0] == OK
    assert doctor.check_python((3, 9, 18))[0] == FAIL
    assert doctor.check_versions()[0] == OK
    good = {"keras": "3.15.1", "jax": "0.10.2", "jaxlib": "0.10.2", "numpy": "2.4.6", "tensorflow": None}
    assert doctor.check_versions(good)[0] == OK
    status, message, fix = doctor.check_versions({**good, "jaxlib": "0.9.0"})
    assert status == FAIL and "jax 0.10.2 and jaxlib 0.9.0 are from different releases" in message
    assert "pip install -U jax jaxlib" in fix
    status, message, fix = doctor.check_versions({**good, "keras": None, "tensorflow": "2.15.0"})
    assert status == FAIL and "keras is not installed" in message and "tensorflow 2.15.0 is older than 2.18" in message
    assert "pip install keras" in fix and "pip install -U 'tensorflow-cpu>=2.18'" in fix


def test_version_floors_are_pyprojects():
    import tomllib

    from tests.support import REPO

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    python, floors = doctor.version_floors()
    assert project["requires-python"] == ">=" + ".".join(map(str, python))
    for requirement in project["dependencies"]:
        name, _, floor = requirement.partition(">=")
        if name in ("keras", "jax", "numpy"):
            assert floors[name] == floor
    assert f"tensorflow>={floors['tensorflow']}" in project["optional-dependencies"]["tensorflow"]


def test_a_backend_that_imports_is_ok():
    status, message, _ = doctor.check_backend("jax")
    assert status == OK and message.startswith("jax ")


@pytest.mark.parametrize("name", ["jax", "tensorflow"])
def test_a_backend_installed_but_broken_fails_with_a_reinstall(monkeypatch, name):
    monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError, as a broken install does
    status, message, fix = doctor.check_backend(name)
    assert status == FAIL and f"{name} is installed but does not import: ModuleNotFoundError: import of {name} halted" in message
    assert f"pip install --force-reinstall {doctor.PIP_NAMES[name]}" in fix


def test_a_missing_backend_fails_for_jax_and_warns_for_optional_tensorflow(monkeypatch):
    monkeypatch.setattr(doctor, "_installed_version", lambda name: None)
    for name in ("jax", "tensorflow"):
        monkeypatch.setitem(sys.modules, name, None)
    assert doctor.check_backend("jax")[:2] == (FAIL, "jax is not installed; acceltrain trains with it by default")
    status, _, fix = doctor.check_backend("tensorflow")
    assert status == WARN and fix == "pip install tensorflow-cpu"


def test_the_output_folder_fails_under_a_file_and_in_proc(tmp_path):
    assert doctor.check_output_folder(tmp_path / "new" / "runs")[0] == OK
    (tmp_path / "a_file").write_text("")
    # root passes os.access everywhere: these are folders nobody can create, whoever runs the tests
    for unwritable in (tmp_path / "a_file" / "runs", "/proc/acceltrain-runs", tmp_path / "a_file"):
        status, message, fix = doctor.check_output_folder(unwritable)
        assert status == FAIL and "--out" in fix, message


def test_the_compile_cache_is_the_one_connect_uses_with_its_entries(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)  # as before jax is imported: the folder comes from the env
    status, message, _ = doctor.check_compile_cache(env={"XDG_CACHE_HOME": str(tmp_path)})
    assert status == OK and f"in {tmp_path / 'acceltrain' / 'jax'} (empty" in message
    (tmp_path / "mine").mkdir()
    for key in ("jit_a", "jit_b"):
        (tmp_path / "mine" / f"{key}-cache").write_bytes(b"x" * 2**19)
        (tmp_path / "mine" / f"{key}-atime").write_bytes(b"1")
    status, message, _ = doctor.check_compile_cache(env={"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "mine")})
    assert status == OK and "(2 compiled programs, 1.0 MiB)" in message
    status, message, fix = doctor.check_compile_cache(env={"ACCELTRAIN_COMPILATION_CACHE": "0"})
    assert status == OK and "off (ACCELTRAIN_COMPILATION_CACHE=0)" in message and "unset" in fix
    (tmp_path / "a_file").write_text("")
    assert doctor.check_compile_cache(str(tmp_path / "a_file"))[0] == FAIL


def test_connect_keeps_a_minimum_compile_time_the_user_set():
    from acceltrain.backends.jax import compiles

    assert compiles._user_min_compile_time({}, 1.0) is None  # JAX's default: acceltrain caches every program
    assert compiles._user_min_compile_time({"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "1"}, 1.0) == 1.0
    assert compiles._user_min_compile_time({}, 5.0) == 5.0


def test_tpu_here_none_and_on_simulated_tpu_machines():
    assert doctor.check_tpu(device_files=[], libtpu=False)[0] == OK
    status, _, fix = doctor.check_tpu(device_files=["/dev/accel0"], libtpu=False)
    assert status == WARN and "jax[tpu]" in fix
    assert doctor.check_tpu(device_files=["/dev/accel0"], libtpu=True, probe=lambda platform: 4)[0] == OK


def test_a_busy_tpu_names_the_process_holding_it():
    def busy(platform):
        raise RuntimeError("Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by process "
                           "with pid 4242. Not attempting to load libtpu.so in this process.")

    status, message, fix = doctor.check_tpu(device_files=["/dev/accel0"], libtpu=True, probe=busy)
    assert status == FAIL and "busy" in message and "pid 4242" in message
    assert "kill 4242" in fix and "lsof" in fix


def test_gpus_with_and_without_a_jax_that_sees_them():
    h200 = [("NVIDIA H200", 143771.0, 500.0)]
    status, message, _ = doctor.check_gpus(query=lambda: h200, jax_gpus=lambda: 1)
    assert status == OK and "NVIDIA H200 140 GiB (140 GiB free)" in message
    status, _, fix = doctor.check_gpus(query=lambda: h200, jax_gpus=lambda: 0)
    assert status == WARN and "jax[cuda12]" in fix
    full = [("NVIDIA H200", 143771.0, 140000.0)]
    assert doctor.check_gpus(query=lambda: full, jax_gpus=lambda: 1)[0] == WARN
    assert doctor.check_gpus(query=lambda: [], jax_gpus=lambda: 0)[0] == OK


def test_format_marks_each_line_and_counts():
    checks = [doctor.Check("python", OK, "fine"), doctor.Check("output folder", FAIL, "broken", "do this")]
    # no colour codes: stdout is not a terminal here
    assert doctor.format_check(checks[0]) == "ok    python         fine"
    assert doctor.format_check(checks[1]).splitlines() == ["fail  output folder  broken",
                                                           "                     fix: do this"]
    assert doctor.summary(checks) == "1 ok, 0 warnings, 1 failure"


def test_the_plan_compiler_check_says_compiled_or_estimated_and_how_to_get_libtpu():
    import importlib.util
    import tomllib

    from tests.support import REPO

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    extra = next(name for name, requirements in extras.items() if any(r.startswith("jax[tpu]") for r in requirements))
    jax_requires = ["numpy>=1.26", 'libtpu==0.0.42.*; extra == "tpu"']
    status, message, fix = doctor.check_plan_compiler({"libtpu": None, "jax": "0.10.2"}, jax_requires)
    assert status == OK and "estimates TPU targets" in message and fix.startswith(f"pip install 'acceltrain[{extra}]'")
    status, message, fix = doctor.check_plan_compiler({"libtpu": "0.0.42.1", "jax": "0.10.2"}, jax_requires)
    assert (status, fix) == (OK, "") and "compiles TPU steps on this machine: libtpu 0.0.42.1, as jax 0.10.2 asks " \
                                         "(libtpu==0.0.42.*)" in message
    status, message, fix = doctor.check_plan_compiler({"libtpu": "0.0.40", "jax": "0.10.2"}, jax_requires)
    assert status == WARN and "expects libtpu==0.0.42.*" in message and "jax[tpu]==0.10.2" in fix
    here = doctor.check_plan_compiler()  # this environment: dev brings libtpu
    assert here[0] == OK and ("compiles" if importlib.util.find_spec("libtpu") else "estimates") in here[1]


def test_a_tensorflow_tpu_resolver_error_points_to_tpu_local():
    def resolver(platform):
        raise RuntimeError("Please provide a TPU Name to connect to (TPU_NAME is not set).")

    status, message, fix = doctor.check_tpu(device_files=["/dev/vfio/0"], libtpu=True, probe=resolver)
    assert status == FAIL and "TPUClusterResolver(tpu='local')" in fix


def test_the_device_probe_runs_in_a_child_and_reports_jax_errors():
    assert doctor._jax_device_count("cpu") >= 1
    with pytest.raises(RuntimeError, match="tpu"):  # no TPU here: JAX's own words come back
        doctor._jax_device_count("tpu")


def test_the_dry_run_connects_as_the_flags_say(monkeypatch):
    """doctor --platform/--tpu/--precision were accepted and ignored (issue 20, item 12): the dry run's
    connect gets them."""
    asked = []

    def run(command, **kwargs):
        asked.append(command[-1])
        raise doctor.subprocess.TimeoutExpired(command, 0)

    monkeypatch.setattr(doctor.subprocess, "run", run)
    doctor.check_dry_run(platform="tpu", tpu="my-tpu", precision="float32")
    request = json.loads(asked[0].split("_dry_run(", 1)[1].rstrip(")").strip("'"))
    assert (request["platform"], request["tpu"], request["precision"]) == ("tpu", "my-tpu", "float32")


def test_a_dry_run_that_hangs_fails_with_where_to_look():
    status, message, fix = doctor.check_dry_run(timeout=0.1)
    assert status == FAIL and "did not finish in 0 s" in message and "-v" in fix


# --- The whole command, as a user runs it --------------------------------------------------------


def test_doctor_passes_here_with_a_data_parallel_dry_run(tmp_path):
    result = run_cli("doctor", "--json", "--out", tmp_path / "runs", "--simulate-devices", 2, "--batch-size", 64,
                     timeout=300)
    checks = {check["name"]: check for check in json.loads(result.stdout)}
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(check["status"] != FAIL for check in checks.values())
    assert "DataParallel on 2 simulated cpu devices" in checks["dry run"]["message"]
    assert "batch 64 = 32 × 2, one step compiled" in checks["dry run"]["message"]


def test_doctor_fails_clearly_on_a_broken_environment(tmp_path):
    """TensorFlow that does not import, an unwritable --out, a batch that does not divide: exit 1, each named."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['tensorflow'] = None\n")
    result = run_cli("doctor", "--out", "/proc/acceltrain-runs", "--simulate-devices", 7, timeout=300,
                     PYTHONPATH=str(site))
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("fail  tensorflow") and "does not import" in line for line in lines)
    assert any(line.startswith("fail  output folder") and "/proc" in line for line in lines)
    assert any(line.startswith("fail  dry run") and "does not divide over 7 replicas" in line for line in lines)
    assert any(line.startswith("ok    jax") for line in lines)
    assert lines[-1].endswith("3 failures")


@pytest.mark.parametrize("args, message", [
    (["--batch-size", "0"], "Received --batch-size 0. Expected a whole number of at least 1"),
    (["--batch-size", "-5"], "Received --batch-size -5. Expected a whole number of at least 1"),
    (["--simulate-devices", "0"], "Received --simulate-devices 0. Expected a whole number of at least 1"),
    (["--backend", "torch"], "Received --backend 'torch'. Valid: jax, tensorflow."),
    (["--backend", "tensorflow", "--distribution", "fsdp"], "Pass --backend jax, or --distribution data."),
])
def test_a_flag_no_machine_takes_exits_2_naming_it_before_any_check(args, message, capsys):
    """--batch-size 0 was read as none given: the dry run took the recipe's 1200 and passed, exit 0, without a word;
    the others failed the dry run, exit 1, naming connect()'s keyword (simulate_devices=0, backend: 'torch')."""
    from acceltrain.cli import main

    assert main(["doctor", *args]) == 2
    captured = capsys.readouterr()
    assert message in captured.err, captured.err
    assert "Traceback" not in captured.err and captured.out == ""  # no check ran
