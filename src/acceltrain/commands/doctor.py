"""`acceltrain doctor`: check this machine for training, and for each problem say how to fix it.

Each check is a small function returning (status, message, fix): status is "ok", "warn" (training
works, but not as well as it could) or "fail" (training would not work, or not on this hardware).
Tests call them one by one and can hand them a broken environment.
"""

import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import asdict, dataclass
from pathlib import Path

from acceltrain import log

OK, WARN, FAIL = "ok", "warn", "fail"

# The floors come from one place: pyproject.toml, as the installed package's metadata states it (a
# test checks the two agree). Python's floor is its requires-python.
PIP_NAMES = {"keras": "keras", "jax": "jax", "jaxlib": "jax", "numpy": "numpy", "tensorflow": "tensorflow-cpu"}

DRY_RUN_TIMEOUT = 600  # seconds: a first compile on a TPU can take minutes


@dataclass
class Check:
    name: str
    status: str
    message: str
    fix: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _check_settings(backend, simulate_devices, distribution, platform, tpu, precision, batch_size) -> None:
    """The dry run's settings, checked as run and launch check theirs (Settings.check). Before, a batch of 0 was read
    as none given (the recipe's 1200 dry-ran and passed) and the rest failed the dry run naming connect()'s keyword
    (simulate_devices=0), not the flag typed."""
    from acceltrain.cluster import Cluster
    from acceltrain.errors import option, positive_int
    from acceltrain.runtime import Settings

    if batch_size is not None:
        positive_int(batch_size, option("batch_size"), ": the global batch of the dry run")
    Settings(backend=backend, simulate_devices=simulate_devices, distribution=distribution, platform=platform,
             cluster=Cluster(tpu=tpu), precision=precision).check()


def run_all(*, out: str = "runs", backend: str | None = None, simulate_devices: int | None = None,
            distribution: str = "auto", platform: str = "auto", tpu: str | None = None, precision: str = "auto",
            batch_size: int | None = None, on_check=None) -> list[Check]:
    """Every check, in the order a person would fix them: the software, the hardware, then a dry run (on
    `platform`, or the TPU named `tpu`, as `acceltrain train` would connect with the same flags).

    `on_check(check)` is called as each one finishes, so a slow check never hides the ones before it. A setting no
    machine takes is refused first (UsageError, naming the flag under the CLI), not a failed dry run.
    """
    _check_settings(backend, simulate_devices, distribution, platform, tpu, precision, batch_size)
    checks = [
        ("python", check_python),
        ("versions", check_versions),
        ("jax", lambda: check_backend("jax")),
        ("tensorflow", lambda: check_backend("tensorflow")),
        ("tpu", check_tpu),
        ("gpu", check_gpus),
        ("plan compiler", check_plan_compiler),
        ("compile cache", check_compile_cache),
        ("output folder", lambda: check_output_folder(out)),
        ("dry run", lambda: check_dry_run(backend=backend, simulate_devices=simulate_devices,
                                          distribution=distribution, platform=platform, tpu=tpu,
                                          precision=precision, batch_size=batch_size)),
    ]
    results = []
    for name, check in checks:
        with log.phase("dry run: one training step") if name == "dry run" else contextlib.nullcontext():
            status, message, fix = check()
        results.append(Check(name, status, message, fix))
        if on_check is not None:
            on_check(results[-1])
    return results


NAME_WIDTH = len("output folder")  # the longest check names, so the messages line up


def format_check(check: Check) -> str:
    """The check's line, its fix indented below; the status coloured on a terminal only."""
    colours = {OK: "green", WARN: "yellow", FAIL: "red"}
    status = log.paint(f"{check.status:<4}", colours[check.status], sys.stdout)
    lines = [f"{status}  {check.name:<{NAME_WIDTH}}  {check.message}"]
    if check.fix:
        label = "tip" if check.status == OK else "fix"
        lines.append(f"      {'':<{NAME_WIDTH}}  {label}: {check.fix}")
    return "\n".join(lines)


def summary(checks: list[Check]) -> str:
    counts = {status: sum(check.status == status for check in checks) for status in (OK, WARN, FAIL)}
    return (f"{counts[OK]} ok, {counts[WARN]} warning{'s' * (counts[WARN] != 1)}, "
            f"{counts[FAIL]} failure{'s' * (counts[FAIL] != 1)}")


# --- Software ---------------------------------------------------------------------------------

def version_floors() -> tuple[tuple[int, ...], dict[str, str]]:
    """(Python's floor, {library: floor}) as pyproject.toml states them: the source tree's own file in a
    checkout, else the installed package's metadata (built from the same file)."""
    import re

    project = _source_tree_project()
    if project is not None:
        python = project["requires-python"]
        requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    else:
        from importlib import metadata

        python = metadata.metadata("acceltrain")["Requires-Python"]
        requirements = metadata.requires("acceltrain") or []
    floors = {}
    for requirement in requirements:
        found = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^]]*\])?\s*>=\s*([0-9.]+)", requirement)
        if found:
            name = {"tensorflow-cpu": "tensorflow"}.get(found[1].lower(), found[1].lower())
            floors.setdefault(name, found[3])
    return tuple(int(part) for part in python.strip().removeprefix(">=").split(".")), floors


def _source_tree_project() -> dict | None:
    """pyproject.toml's [project] table in a checkout; None when installed (then: the package metadata)."""
    pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
    if not pyproject.is_file():
        return None
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads(pyproject.read_text())["project"]


def check_python(version_info=sys.version_info) -> tuple[str, str, str]:
    version = ".".join(map(str, version_info[:3]))
    minimum_python = version_floors()[0]
    if tuple(version_info[:2]) < minimum_python:
        return FAIL, f"Python {version}: acceltrain needs {'.'.join(map(str, minimum_python))} or newer", \
            f"install Python {'.'.join(map(str, minimum_python))} or newer and reinstall acceltrain in it"
    return OK, f"Python {version} ({platform.machine()}, {platform.system()})", ""


def check_versions(versions: dict[str, str | None] | None = None) -> tuple[str, str, str]:
    """The libraries' versions, each new enough, and jax and jaxlib from the same release."""
    if versions is None:
        versions = {name: _installed_version(name) for name in ("keras", "jax", "jaxlib", "numpy", "tensorflow")}
    listed = ", ".join(f"{name} {version}" for name, version in versions.items() if version)
    problems, fixes = [], []
    for name in ("keras", "jax", "numpy"):
        if not versions.get(name):
            problems.append(f"{name} is not installed")
            fixes.append(f"pip install {PIP_NAMES[name]}")
    floors = version_floors()[1]
    for name, minimum in ((name, floors[name]) for name in ("keras", "jax", "numpy", "tensorflow") if name in floors):
        version = versions.get(name)
        if version and _version_tuple(version) < _version_tuple(minimum):
            problems.append(f"{name} {version} is older than {minimum}")
            fixes.append(f"pip install -U '{PIP_NAMES[name]}>={minimum}'")
    jax, jaxlib = versions.get("jax"), versions.get("jaxlib")
    if jax and not jaxlib:
        problems.append("jax is installed without jaxlib")
        fixes.append("pip install -U jax (it brings the matching jaxlib)")
    elif jax and jaxlib and _version_tuple(jax)[:2] != _version_tuple(jaxlib)[:2]:
        problems.append(f"jax {jax} and jaxlib {jaxlib} are from different releases")
        fixes.append("pip install -U jax jaxlib (the same version of both)")
    if problems:
        return FAIL, f"{'; '.join(problems)} ({listed or 'nothing found'})", "; ".join(fixes)
    return OK, listed, ""


def check_backend(name: str) -> tuple[str, str, str]:
    """Whether a Keras backend imports. jax is required; tensorflow is optional."""
    required = name == "jax"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter would bury the checks
    started = time.perf_counter()
    try:
        module = importlib.import_module(name)
    except Exception as error:  # a broken install raises anything: ImportError, OSError, AttributeError
        # pip's record, not the import system: a broken install is still installed, and that is the news
        if _installed_version(name) is None:
            if required:
                return FAIL, f"{name} is not installed; acceltrain trains with it by default", \
                    f"pip install {PIP_NAMES[name]}"
            return WARN, f"{name} is not installed (optional: the TensorFlow backend, --tensorboard)", \
                f"pip install {PIP_NAMES[name]}"
        return FAIL, f"{name} is installed but does not import: {type(error).__name__}: {_first_line(error)}", \
            f"reinstall it: pip install --force-reinstall {PIP_NAMES[name]} (and check it matches this Python " \
            f"{platform.python_version()})"
    seconds = time.perf_counter() - started
    version = getattr(module, "__version__", "?")
    return OK, f"{name} {version} imports ({seconds:.1f} s)", ""


def check_compile_cache(cache_dir: str | None = None, env=None) -> tuple[str, str, str]:
    """The compile cache connect() will use on JAX: its folder, size and entries; or off, and why."""
    from acceltrain.backends import jax_compilation_cache_dir

    env = os.environ if env is None else env
    if cache_dir is None:
        jax = sys.modules.get("jax")
        configured = getattr(getattr(jax, "config", None), "jax_compilation_cache_dir", None)
        cache_dir = configured or jax_compilation_cache_dir(env)  # a folder set in code wins, as in connect()
    if not cache_dir:
        return OK, "JAX's compile cache is off (ACCELTRAIN_COMPILATION_CACHE=0): every run compiles from scratch", \
            "unset ACCELTRAIN_COMPILATION_CACHE to reuse compiled steps across runs"
    folder = Path(cache_dir).expanduser()
    existing = next(p for p in (folder, *folder.parents) if p.exists())  # JAX creates the folder it lacks
    problem = _not_writable(existing)
    if problem:
        return FAIL, f"the compile cache {cache_dir!r} {problem}", \
            "point JAX_COMPILATION_CACHE_DIR at a folder you can write to, or set ACCELTRAIN_COMPILATION_CACHE=0"
    entries = list(folder.glob("*-cache")) if folder.is_dir() else []  # JAX writes one KEY-cache file a program
    size = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) if folder.is_dir() else 0
    state = f"{len(entries)} compiled programs, {size / 2**20:.1f} MiB" if entries else "empty: the first run fills it"
    return OK, f"compile cache (used by connect() on JAX) in {folder} ({state})", ""


def check_artifact(path: str | Path) -> tuple[str, str, str]:
    """A JobSet, sbatch script or SkyPilot task (`launch --emit`'s, or the user's edit of one): sound or not,
    each problem named. The JobSet is validated against the JobSet CRD's own schema (needs jsonschema)."""
    from acceltrain.commands import emit
    from acceltrain.errors import UsageError

    if not Path(path).is_file():
        raise UsageError(f"Received --artifact {path}, which is not a file. Pass the file `acceltrain launch --emit` "
                         "wrote, or your edit of one.")
    try:
        engine, problems = emit.check_artifact(path)
    except ImportError as missing:
        return FAIL, f"{path}: cannot check it without {missing.name}", "pip install 'acceltrain[engines]'"
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return FAIL, f"{path} ({engine}): {problems[0]}{more}", "; ".join(problems[1:4]) or "edit the file as said"
    checked = "the JobSet CRD's schema and " if engine == "jobset" else ""
    return OK, f"{path} ({engine}) passes {checked}acceltrain's checks", ""


def check_output_folder(out: str | Path) -> tuple[str, str, str]:
    out = Path(out)
    if out.exists() and not out.is_dir():
        return FAIL, f"{str(out)!r} is a file, not a folder", "pass --out a folder (new or existing)"
    existing = out
    while not existing.exists():
        existing = existing.parent
    problem = _not_writable(existing)
    if problem:
        return FAIL, f"outputs cannot go to {str(out)!r}: {str(existing)!r} {problem}", \
            "pass --out a folder you can write to (acceltrain creates it)"
    return OK, f"{str(out)!r} is writable" + ("" if out.exists() else " (created on the first run)"), ""


# --- Hardware ---------------------------------------------------------------------------------

def check_tpu(device_files: list[str] | None = None, libtpu: bool | None = None, probe=None) -> tuple[str, str, str]:
    """A TPU: its device files, the libtpu runtime, and whether JAX can open it.

    `probe()` returns the number of TPU devices JAX sees or raises JAX's error; the arguments are
    there so tests can stand in for a TPU machine.
    """
    if device_files is None:
        from acceltrain.hardware import tpu

        device_files = tpu.device_files()
    if libtpu is None:
        libtpu = _findable("libtpu")
    if not device_files:
        note = " (libtpu is installed, but this machine has no TPU)" if libtpu else ""
        return OK, f"no TPU here: no /dev/accel* or /dev/vfio device{note}", ""
    if not libtpu:
        return WARN, f"TPU device files ({', '.join(device_files[:4])}) but no libtpu: JAX would train on " \
                     "the CPU instead", "pip install 'jax[tpu]' (or: pip install 'acceltrain[tpu]')"
    try:
        count = (probe or _jax_device_count)("tpu")
    except Exception as error:  # JAX raises RuntimeError; a broken libtpu may raise anything
        return FAIL, *_explain_tpu_error(str(error))
    if count == 0:
        return FAIL, "TPU device files and libtpu are there, but JAX sees no TPU", \
            "check that libtpu matches jax (pip install -U 'jax[tpu]'); run with TPU_STDERR_LOG_LEVEL=0 for its log"
    return OK, f"{count} TPU device{'s' * (count > 1)} visible to JAX " \
               "(on TensorFlow, a TPU VM is reached with TPUClusterResolver(tpu='local'))", ""


def _explain_tpu_error(error: str) -> tuple[str, str]:
    """The cause of a TPU that does not open, from libtpu's words, and the fix."""
    busy = re.search(r"in use by (?:process with )?pid (\d+)", error, re.I)
    if busy or "busy" in error.lower() or "already in use" in error.lower():
        holder = f" (pid {busy.group(1)})" if busy else ""
        return (f"the TPU is busy: another process holds it{holder}. One process at a time can use a TPU",
                f"stop that process{' (kill ' + busy.group(1) + ')' if busy else ''}, or find it with "
                "`sudo lsof -w /dev/accel* /dev/vfio/*`; a finished Python or notebook kernel may still hold it")
    if "tpu='local'" in error or "TPU_NAME" in error or "cluster resolver" in error.lower():
        return (f"TensorFlow's TPU resolver found no TPU: {_first_line(error)}",
                "on a TPU VM, resolve with tf.distribute.cluster_resolver.TPUClusterResolver(tpu='local')")
    return f"JAX cannot open the TPU: {_first_line(error)}", \
        "check that libtpu matches jax (pip install -U 'jax[tpu]'), and that no other process uses the TPU"


def check_gpus(query=None, jax_gpus=None) -> tuple[str, str, str]:
    """NVIDIA GPUs from nvidia-smi, with their memory, and whether JAX can use them.

    `query()` returns [(name, total MiB, used MiB)] and `jax_gpus()` JAX's GPU count; tests pass their own.
    """
    if query is None and shutil.which("nvidia-smi") is None:
        return OK, "no GPU here (no nvidia-smi)", ""
    try:
        gpus = (query or _nvidia_smi)()
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        return WARN, f"nvidia-smi is there but failed: {_first_line(error)}", \
            "check the NVIDIA driver (run nvidia-smi yourself)"
    if not gpus:
        return OK, "no GPU here (nvidia-smi lists none)", ""
    described = "; ".join(f"{name} {total / 1024:.0f} GiB ({(total - used) / 1024:.0f} GiB free)"
                          for name, total, used in gpus)
    try:
        seen = (jax_gpus or (lambda: _jax_device_count("gpu")))()
    except Exception:  # no CUDA plugin: "Unknown backend gpu"
        seen = 0
    if seen == 0:
        return WARN, f"{len(gpus)} GPU(s): {described}; but JAX sees none and would train on the CPU", \
            "pip install -U 'jax[cuda12]' (or: pip install 'acceltrain[gpu]')"
    busy = [name for name, total, used in gpus if total and used / total > 0.5]
    if busy:
        return WARN, f"{len(gpus)} GPU(s): {described}; over half the memory of {len(busy)} is in use by " \
                     "other processes", "see which with nvidia-smi; stop them, or expect out-of-memory errors"
    return OK, f"{seen} GPU(s) visible to JAX: {described}", ""


def _nvidia_smi() -> list[tuple[str, float, float]]:
    result = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,memory.total,memory.used", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, timeout=30, check=True,
    )
    rows = [line.split(",") for line in result.stdout.strip().splitlines() if line.strip()]
    return [(name.strip(), float(total), float(used)) for name, total, used in rows]


def _jax_device_count(platform_name: str) -> int:
    """JAX's device count for a platform, asked in a child process that exits at once.

    Asked here, JAX would hold the TPU (one process at a time) or most of the GPU memory for as long as
    doctor runs, and the dry run after it would find the device busy. Raises RuntimeError with JAX's error.
    """
    code = f"import jax; print(len(jax.devices({platform_name!r})))"
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"JAX did not list its {platform_name} devices within 300 s") from None
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines() if "Error" in line or "error" in line]
        raise RuntimeError(errors[-1] if errors else _last_line(result.stderr))
    return int(result.stdout.strip().splitlines()[-1])


def check_plan_compiler(versions: dict[str, str | None] | None = None,
                        jax_requires: list[str] | None = None) -> tuple[str, str, str]:
    """Whether `acceltrain plan` compiles TPU steps here (libtpu's compile-only client) or only estimates.

    From the installed versions: libtpu is not loaded here (on a TPU machine that would hold the TPU), so
    a libtpu that is installed but broken shows only when plan compiles. `versions` ({"libtpu", "jax"}) and
    `jax_requires` (jax's requirements, as its metadata lists them) are there for tests.
    """
    if versions is None:
        versions = {"libtpu": _installed_version("libtpu") if _findable("libtpu") else None,
                    "jax": _installed_version("jax")}
    if jax_requires is None:
        jax_requires = _requirements_of("jax")
    extra = _extra_requiring("jax[tpu]")
    install = f"pip install 'acceltrain[{extra}]'" if extra else "pip install 'jax[tpu]'"
    libtpu, jax = versions.get("libtpu"), versions.get("jax")
    if not libtpu:
        return OK, "acceltrain plan estimates TPU targets from shapes: libtpu (its TPU compiler) is not installed", \
            f"{install} (libtpu, ~680 MB) to have plan compile the step for the TPU on this machine"
    pins = [requirement.split(";")[0].strip() for requirement in jax_requires
            if requirement.replace(" ", "").startswith("libtpu") and 'extra=="tpu"' in requirement.replace(" ", "")]
    pin = pins[0].removeprefix("libtpu").strip() if pins else None
    if pin and not _version_matches(libtpu, pin):
        return WARN, f"libtpu {libtpu} is installed, but jax {jax} expects libtpu{pin}: plan's TPU compile may fail", \
            f"pip install -U 'jax[tpu]=={jax}' (the libtpu of this jax)"
    agreed = f", as jax {jax} asks (libtpu{pin})" if pin else ""
    return OK, f"acceltrain plan compiles TPU steps on this machine: libtpu {libtpu}{agreed}", ""


def _requirements_of(distribution: str) -> list[str]:
    try:
        return importlib.metadata.requires(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        return []


def _extra_requiring(requirement: str) -> str | None:
    """The first of acceltrain's extras (pyproject.toml's optional-dependencies) that lists `requirement`."""
    project = _source_tree_project()
    if project is not None:
        extras = project["optional-dependencies"]
        return next((name for name, requirements in extras.items()
                     if any(r.replace(" ", "").startswith(requirement) for r in requirements)), None)
    for line in _requirements_of("acceltrain"):  # installed: 'jax[tpu]>=0.4.35; extra == "tpu"'
        found = re.search(r'extra\s*==\s*"([^"]+)"', line)
        if found and line.replace(" ", "").startswith(requirement):
            return found[1]
    return None


def _version_matches(version: str, pin: str) -> bool:
    """"0.0.42.1" against "==0.0.42.*" (or "==0.0.42.1"); any other kind of pin counts as met."""
    if not pin.startswith("=="):
        return True
    wanted = pin[2:].strip()
    return version.startswith(wanted[:-1]) if wanted.endswith("*") else version == wanted


# --- A dry run --------------------------------------------------------------------------------

def check_dry_run(*, backend: str | None = None, simulate_devices: int | None = None, distribution: str = "auto",
                  platform: str = "auto", tpu: str | None = None, precision: str = "auto",
                  batch_size: int | None = None, timeout: float = DRY_RUN_TIMEOUT) -> tuple[str, str, str]:
    """Connect, build the recipe's model in the distribution's scope, divide the batch, compile one step.

    In a fresh process: the device count is fixed when JAX starts, and this process has already looked at
    the real hardware.
    """
    request = {"backend": backend, "simulate_devices": simulate_devices, "distribution": distribution,
               "platform": platform, "tpu": tpu, "precision": precision, "batch_size": batch_size}
    code = f"from acceltrain.commands.doctor import _dry_run; _dry_run({json.dumps(request)!r})"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                                env=env)
    except subprocess.TimeoutExpired:
        return FAIL, f"one training step did not finish in {timeout:.0f} s", \
            "run `acceltrain train --epochs 1 -v` to see where it stops"
    lines = result.stdout.strip().splitlines()
    try:
        outcome = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return FAIL, f"the dry run crashed (exit {result.returncode}): {_last_line(result.stderr)}", \
            "run `acceltrain train --epochs 1 -v` for the full error"
    return outcome["status"], outcome["message"], outcome["fix"]


def _dry_run(request_json: str) -> None:
    """In the child: one step of the default recipe; prints one JSON line {status, message, fix}."""
    request = json.loads(request_json)
    log.set_quiet(True)
    try:
        status, message, fix = _one_step(**request)
    except Exception as error:  # noqa: BLE001 - the point is to report whatever breaks
        from acceltrain.errors import AcceltrainError

        fix = "change the setting the message names, then rerun acceltrain doctor" \
            if isinstance(error, AcceltrainError) else \
            "run `acceltrain train --epochs 1 -v` for the full error"
        status, message = FAIL, f"{type(error).__name__}: {_first_line(error)}"
    print(json.dumps({"status": status, "message": message, "fix": fix}))


def _one_step(*, backend, simulate_devices, distribution, platform="auto", tpu=None, precision="auto",
              batch_size) -> tuple[str, str, str]:
    import numpy as np

    from acceltrain import recipes
    from acceltrain.inputs import arrays
    from acceltrain.runtime import Settings

    recipe = recipes.get(recipes.DEFAULT)
    batch_size = batch_size or recipe.BATCH_SIZE
    # connect()'s keywords read as `acceltrain train` reads its flags: one Settings, the same connect.
    runtime = Settings.read(types.SimpleNamespace(backend=backend, simulate_devices=simulate_devices,
                                                  distribution=distribution, platform=platform, tpu=tpu,
                                                  precision=precision)).connect(verbose=False)
    arrays.check_batch_size(batch_size, runtime.num_replicas)
    with runtime.scope():
        model = recipe.build_model()
    rng = np.random.default_rng(0)
    x, y = recipe.preprocess(rng.integers(0, 256, (batch_size, 28, 28), dtype=np.uint8),
                             rng.integers(0, recipe.NUM_CLASSES, batch_size))
    started = time.perf_counter()
    with runtime.scope():
        model.train_on_batch(x, y)
    seconds = time.perf_counter() - started
    where = f"{runtime.num_devices} {'simulated ' if runtime.hardware.simulated else ''}{runtime.platform} " \
            f"device{'s' * (runtime.num_devices > 1)}"
    return OK, (f"{runtime.backend}, {runtime.distribution_name} on {where}: {model.name} built "
                f"({model.count_params():,} parameters), batch {batch_size} = {batch_size // runtime.num_replicas} "
                f"× {runtime.num_replicas}, one step compiled and ran in {seconds:.1f} s"), ""


# --- Helpers ----------------------------------------------------------------------------------

def _installed_version(name: str) -> str | None:
    for distribution in (name, PIP_NAMES.get(name), f"{name}-cpu"):
        try:
            return importlib.metadata.version(distribution)
        except (importlib.metadata.PackageNotFoundError, ValueError, TypeError):
            continue
    return None


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ValueError, ImportError):  # None in sys.modules, or a broken parent package: there but unusable
        return True


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def _not_writable(folder: Path) -> str | None:
    """Why files cannot be created in `folder`, or None. Tries for real: os.access says yes to root."""
    if not folder.is_dir():
        return "is not a folder"
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        return f"is not writable ({error.strerror})"
    return None


def _first_line(error) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"

