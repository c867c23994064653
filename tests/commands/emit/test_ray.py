"""`acceltrain launch --emit ray`: the Ray job's driver pinned as text (golden/), read back by `doctor --artifact`,
and run for real by tests/commands/test_ray_job.py. ACCELTRAIN_UPDATE_GOLDEN=1 rewrites the golden files."""

import ast
import os

import pytest

from acceltrain.commands import emit
from acceltrain.commands.emit import ray
from tests.commands.emit.test_emit import GOLDEN, _launch

CASES = [
    ("ray-cpu-nodes-2.py", "--emit ray --target cpu --nodes 2 --checkpoint-dir /nfs/ckpt --checkpoint-every '10 steps' "
                           "train.py --epochs 3"),
    ("ray-tpu-v5e-16.py", "--emit ray --target tpu-v5e-16 --max-restarts 3 train.py"),
    ("ray-h100-8-nodes-2.py", "--emit ray --target h100-8 --nodes 2 --name mnist train.py"),
]


@pytest.mark.parametrize("golden, command", CASES, ids=[case[0] for case in CASES])
def test_the_ray_job_is_its_golden_file_and_passes_its_checks(golden, command, capsys):
    code, out, err = _launch(capsys, command)
    assert code == 0, err
    path = GOLDEN / golden
    if os.environ.get("ACCELTRAIN_UPDATE_GOLDEN") == "1":
        path.write_text(out)
    assert out == path.read_text(), f"{golden} changed: review, then rerun with ACCELTRAIN_UPDATE_GOLDEN=1"
    assert emit.check_artifact(path) == ("ray", [])
    ast.parse(out)  # Python, as Ray runs it


@pytest.mark.parametrize("target, workers, resources", [
    ("--target cpu --nodes 2 --processes 2", 4, {}),  # 2 workers a node
    ("--target tpu-v5e-16", 4, {"resources_per_worker": {"TPU": 4}}),  # one a host, holding its 4 chips
    ("--target tpu-v5e-8", 1, {"resources_per_worker": {"TPU": 8}}),
    ("--target h100-8 --nodes 2", 2, {"gpus_per_worker": 8}),
])
def test_one_worker_a_process_of_the_job_holding_its_hosts_chips(target, workers, resources, capsys):
    code, out, err = _launch(capsys, f"--emit ray {target} t.py")
    assert code == 0, err
    call = next(node for node in ast.walk(ast.parse(out)) if isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "run_job")
    keywords = {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords}
    assert keywords["workers"] == workers
    assert {name: keywords[name] for name in resources} == resources
    assert not {"resources_per_worker", "gpus_per_worker"} - set(resources) & set(keywords)


@pytest.mark.parametrize("edit, says", [
    (("'--resume', ", ""), "no --checkpoint-dir DIR --resume"),
    (("workers=2", "workers=0"), "workers=0: expected a whole number of at least 1"),
    (("max_failures=10", "max_failures='ten'"), "max_failures='ten'"),
    (("['acceltrain', 'run',", "['python',"), "not `acceltrain run ...`"),
    (("workers=2", "workers=len([1, 2])"), "not plain values"),
    (("raise SystemExit(run_job(", "raise SystemExit(run_job(1, "), "expected one run_job(COMMAND"),
])
def test_an_edited_ray_job_acceltrain_cannot_run_is_named(edit, says):
    text = (GOLDEN / "ray-cpu-nodes-2.py").read_text()
    assert edit[0] in text
    problems = ray.check(text.replace(*edit))
    assert any(says in problem for problem in problems), problems
