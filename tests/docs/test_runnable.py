"""Every block of README.md and the manual marked runnable (docs/runnable.py says how) runs here, on this CPU, in
its fast form, as a user runs it after the plain install (no KERAS_BACKEND, a fresh HOME, the extras it does not
name uninstalled), and its test fails when the block fails, when an example output on the page is not what it
printed, or when its connect() line names another backend than that user gets. All of them are in CI."""

import pytest

from docs import runnable
from tests import support


def every_block() -> list[runnable.Block]:
    return [block for page in runnable.documents() for block in runnable.find(page)]


# Blocks that fail today, each with why; strict: the day one passes, its test fails until it leaves this list.
FAILING: dict = {}


def cases() -> list:
    every = [case for page in runnable.documents() for case in runnable.executed(runnable.find(page))]
    return [pytest.param(block, files, id=block.where, marks=[
                pytest.mark.xfail(strict=True, reason=FAILING[key]) for key in FAILING
                if key[0] == block.page.name and block.code.startswith(key[1])])
            for block, files in runnable.once_each(every)]


def check(block: runnable.Block, files: list[runnable.Block], folder) -> None:
    done = runnable.run(block, files, folder, support.env())
    assert done.returncode == 0, (f"the runnable block at {block.where} failed (exit {done.returncode}):\n"
                                  f"{block.prepared()}\n--- stdout ---\n{done.stdout[-3000:]}\n"
                                  f"--- stderr ---\n{done.stderr[-3000:]}")
    missing = runnable.missing_lines(block, done.stdout + done.stderr)
    assert not missing, (f"the block at {block.where} says its commands print lines they did not: "
                         + "; ".join(repr(line) for line in missing) + ". What they printed:\n"
                         + "\n".join(line for line in done.stderr.splitlines() if "acceltrain:" in line)[-3000:]
                         + "\nUpdate the page's comments to what the commands print now.")
    backend, wrong = runnable.backend_lines(block, done.stdout + done.stderr)
    assert not wrong, (f"the block at {block.where} runs after the plain install, where a user gets {backend}, but "
                       "its connect() said otherwise: " + "; ".join(repr(line) for line in wrong))


@pytest.mark.parametrize("block, files", cases())
def test_the_block_runs(block, files, tmp_path):
    check(block, files, tmp_path)


def test_the_manual_has_runnable_blocks_and_every_marker_reads():
    blocks = every_block()  # a marker that cannot be read raises here, naming its page and line
    for block in blocks:
        block.prepared()  # every replacement occurs in its block
    pages = {block.page.name for block in blocks}
    assert {"README.md", "index.md", "your-script.md", "clusters.md", "checkpoints.md"} <= pages
    assert any(not block.title for block in blocks)
    for page_name, start in FAILING:  # each names a block there is
        assert any(b.page.name == page_name and b.code.startswith(start) for b in blocks), (page_name, start)


def page(tmp_path, text: str):
    path = tmp_path / "page.md"
    path.write_text(text)
    return path


def test_a_failing_block_fails_its_test_naming_the_page_and_line(tmp_path):
    found = runnable.find(page(tmp_path, "# A page\n\n<!-- runnable -->\n```bash\necho about to fail\nexit 3\n```\n"))
    [(block, files)] = runnable.executed(found)
    assert block.where.endswith("page.md:4")
    (tmp_path / "run").mkdir()
    with pytest.raises(AssertionError, match=r"page\.md:4 failed \(exit 3\)"):
        check(block, files, tmp_path / "run")


def test_blocks_share_the_files_written_before_them_and_see_this_source_tree(tmp_path):
    text = ('<!-- runnable -->\n```python title="hello.py"\nimport acceltrain\nprint(acceltrain.__file__)\n```\n\n'
            'Not runnable:\n```bash\nexit 1\n```\n\n'
            '<!-- runnable; "never.py" → "hello.py" -->\n```bash\npython never.py\n```\n')
    found = runnable.find(page(tmp_path, text))
    assert [(b.title, b.language) for b in found] == [("hello.py", "python"), (None, "bash")]
    [(block, files)] = runnable.executed(found)
    (tmp_path / "run").mkdir()
    done = runnable.run(block, files, tmp_path / "run", support.env())
    assert done.returncode == 0, done.stderr
    import acceltrain

    assert done.stdout.strip() == acceltrain.__file__


def test_a_blocks_example_output_must_be_what_its_command_prints(tmp_path):
    text = ('<!-- runnable -->\n```bash\necho "acceltrain: 25.2M params, 384.3 MiB   to replicate" >&2\n'
            '#   acceltrain: 25.2M params, 384.3 MiB\n#     to replicate\n#   acceltrain: ... to replicate\n```\n\n'
            '<!-- runnable -->\n```bash\necho "acceltrain: 25.2M params" >&2\n#   acceltrain: 26.0M params\n```\n')
    first, second = (block for block, _ in runnable.executed(runnable.find(page(tmp_path, text))))
    assert runnable.expected_lines(first) == ["acceltrain: 25.2M params, 384.3 MiB to replicate",
                                              "acceltrain: ... to replicate"]
    (tmp_path / "one").mkdir()
    check(first, [], tmp_path / "one")
    (tmp_path / "two").mkdir()
    with pytest.raises(AssertionError, match=r"page\.md:\d+ says its commands print lines they did not: "
                                             r"'acceltrain: 26\.0M params'"):
        check(second, [], tmp_path / "two")


@pytest.mark.parametrize("marker, says", [
    ("<!-- runnable quick -->\n```bash\ntrue\n```\n", "Received <!-- runnable quick -->"),
    ("<!-- runnable slow -->\n```bash\ntrue\n```\n", "Received <!-- runnable slow -->"),  # every block runs in CI
    ("<!-- runnable; epochs 1 -->\n```bash\ntrue\n```\n", "Received the clause 'epochs 1'"),
    ("<!-- runnable; needs gpu -->\n```bash\ntrue\n```\n", "Received needs gpu. Valid extras: tpu, tensorflow"),
    ("<!-- runnable -->\n\n```bash\ntrue\n```\n", "on the line just before a ``` fence"),
    ("<!-- runnable -->\n```text\ntrue\n```\n", "Received a runnable text block. Valid: python, bash"),
    ("<!-- runnable -->\n```bash\ntrue\n", "no closing ``` fence"),
])
def test_a_marker_that_cannot_be_read_is_an_error_naming_the_forms(tmp_path, marker, says):
    with pytest.raises(runnable.BadMarker, match=re_escape(says)):
        runnable.find(page(tmp_path, marker))


def test_a_replacement_that_no_longer_occurs_is_an_error(tmp_path):
    [block] = runnable.find(page(tmp_path, '<!-- runnable; "--epochs 20" → "--epochs 1" -->\n```bash\ntrue\n```\n'))
    with pytest.raises(runnable.BadMarker, match="replaces '--epochs 20', which the block does not contain"):
        block.prepared()


def test_a_block_shown_on_two_pages_runs_once():
    every = [case for page in runnable.documents() for case in runnable.executed(runnable.find(page))]
    ran = {block.where for block, _ in runnable.once_each(every)}
    readme, index = ([block.where for block, _ in every if block.page.name == name and "runtime.fit(" in block.code]
                     for name in ("README.md", "index.md"))
    assert readme[0] in ran and index[0] not in ran  # the same example, the same code: README's runs
    assert len(ran) == len(every) - 1


def test_a_block_runs_as_after_the_plain_install_unless_it_names_an_extra(tmp_path):
    text = ('<!-- runnable -->\n```bash\necho "$HOME" "${KERAS_BACKEND-unset}"\n'
            'python -c "import importlib.util as u; print(u.find_spec(\'tensorflow\'), u.find_spec(\'keras_hub\'))"\n'
            'python -c "from importlib import metadata; print(metadata.version(\'tensorflow-cpu\'))" || true\n'
            'python -c "import tensorflow"\n```\n\n'
            '<!-- runnable; needs hub -->\n```bash\npython -c "import importlib.util as u; print(u.find_spec(\'libtpu\'))"\n'
            'python -c "import importlib.util as u; print(u.find_spec(\'keras_hub\') is not None)"\n```\n')
    plain, hub = (block for block, _ in runnable.executed(runnable.find(page(tmp_path, text))))
    assert hub.needs == ("hub",) and runnable.hidden(hub.needs) == ["libtpu", "tensorboard"]
    (tmp_path / "one").mkdir()
    done = runnable.run(plain, [], tmp_path / "one", support.env(KERAS_BACKEND="jax"))
    assert done.returncode == 1 and "ModuleNotFoundError: No module named 'tensorflow'" in done.stderr
    assert "PackageNotFoundError: No package metadata was found for tensorflow-cpu" in done.stderr  # not installed
    assert done.stdout.split() == [str(tmp_path / "one" / ".home"), "unset", "None", "None"]
    (tmp_path / "two").mkdir()
    done = runnable.run(hub, [], tmp_path / "two", support.env())
    assert done.returncode == 0 and done.stdout.split() == ["None", "True"], done.stderr


def test_a_connect_line_naming_another_backend_than_the_users_fails_the_block(tmp_path):
    text = ('<!-- runnable -->\n```bash\necho "acceltrain: tensorflow on cpu: 1 × cpu" >&2  # acceltrain run x.py\n```\n\n'
            '<!-- runnable -->\n```bash\necho "acceltrain: tensorflow on cpu: 1 × cpu" >&2  # --backend tensorflow\n```\n\n'
            '<!-- runnable -->\n```bash\necho "acceltrain run did not connect"\n```\n')
    wrong, asked, silent = (block for block, _ in runnable.executed(runnable.find(page(tmp_path, text))))
    for name, block in (("one", wrong), ("two", asked), ("three", silent)):
        (tmp_path / name).mkdir()
    with pytest.raises(AssertionError, match=r"where a user gets jax, but its connect\(\) said otherwise: "
                                             r"'acceltrain: tensorflow on cpu"):
        check(wrong, [], tmp_path / "one")
    check(asked, [], tmp_path / "two")
    with pytest.raises(AssertionError, match=r"no line 'acceltrain: BACKEND on PLATFORM'"):
        check(silent, [], tmp_path / "three")


def re_escape(text: str) -> str:
    import re

    return re.escape(text)
