"""The manual's runnable blocks: found in README.md and docs/**/*.md, executed by tests/docs/test_runnable.py.

A fenced block is runnable when the line just before its fence is one of these comments:

    <!-- runnable -->                               run as written
    <!-- runnable; "--epochs 20" → "--epochs 1" --> run with that text replaced first (its fast form, the one CI
                                                    runs); each replacement must occur, so a stale one fails
    <!-- runnable; needs hub -->                    run with the packages of that extra of pyproject.toml (tpu,
                                                    tensorflow, tensorboard, hub) importable too

Every runnable block runs in CI (`pytest -q`), as a user runs it after the plain install (`pip install
acceltrain`): no KERAS_BACKEND, a fresh HOME, and the packages of the extras the block does not name not
importable (a sitecustomize.py on PYTHONPATH hides them from every finder, so they look uninstalled); each
`connect()` line it prints must name the backend a user gets there (tensorflow where the block says
`backend="tensorflow"` or `--backend tensorflow`, else jax).

In a bash block, a comment `#   acceltrain: ...` (three spaces), with the comments of five spaces under it joined on,
is a line the command before it prints: the block's output must hold a line matching it (runs of spaces alike, `...`
standing for any text). So an example output on a page is what that command printed the last time the test ran.

A page's blocks run in order, in one fresh folder: a block with a title (```python title="train.py"```,
```toml title="run.toml"```) is written to that file, for a later block to use, and not run itself; an
untitled python block runs with this Python; an untitled bash block runs with `acceltrain`, `python` and
`python3` meaning this Python and this source tree. The
folder links the repository's examples/ and tests/, so a block may name examples/plain_mnist.py.
"""

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LANGUAGES = ("python", "bash")
MARKER = re.compile(r"^<!-- runnable(?P<rest>.*?) -->$")
REPLACEMENT = re.compile(r'^"(?P<old>[^"]+)"\s*(?:→|->)\s*"(?P<new>[^"]*)"$')
NEEDS = re.compile(r"^needs\s+(?P<extras>[\w, ]+)$")
FENCE = re.compile(r"^```(?P<info>.*)$")
TITLE = re.compile(r'title="(?P<title>[^"]+)"')
FORMS = '<!-- runnable -->, optionally followed by ; "old" → "new" and ; needs EXTRA, EXTRA'
# What each extra of pyproject.toml makes importable beyond the plain install (keras-hub pulls tensorflow-text,
# which needs TensorFlow). A block that names none of them runs with none of these modules.
EXTRAS = {"tpu": ("libtpu",), "tensorflow": ("tensorflow",), "tensorboard": ("tensorflow", "tensorboard"),
          "hub": ("keras_hub", "keras_nlp", "tensorflow_text", "tensorflow")}


class BadMarker(ValueError):
    """A runnable marker this module cannot read: the message names the page, the line and the forms."""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    title: str | None = None  # the file the block is written to, instead of being run
    replacements: tuple[tuple[str, str], ...] = ()
    needs: tuple[str, ...] = ()  # extras of pyproject.toml installed for it, beyond the plain install

    @property
    def where(self) -> str:
        page = self.page.relative_to(REPO) if self.page.is_relative_to(REPO) else self.page
        return f"{page}:{self.line}"

    def prepared(self) -> str:
        """The code as it runs: each replacement made, and each required to occur."""
        code = self.code
        for old, new in self.replacements:
            if old not in code:
                raise BadMarker(f"{self.where}: the marker replaces {old!r}, which the block does not contain. "
                                "Update the marker to the block's text.")
            code = code.replace(old, new)
        return code


SAID, SAID_ON = "#   acceltrain: ", "#     "


def expected_lines(block: Block) -> list[str]:
    """The output lines a bash block's comments say its commands print, each joined from its folded comments."""
    lines = []
    for line in block.code.splitlines():
        if line.startswith(SAID):
            lines.append(line[len(SAID) - len("acceltrain: "):])
        elif line.startswith(SAID_ON) and lines:
            lines[-1] += " " + line[len(SAID_ON):]
    return lines


def missing_lines(block: Block, output: str) -> list[str]:
    """The expected lines (expected_lines) that no line of `output` matches."""
    said = [" ".join(line.split()) for line in output.splitlines()]
    missing = []
    for expected in expected_lines(block):
        pattern = ".*".join(re.escape(part.strip()) for part in " ".join(expected.split()).split("..."))
        if not any(re.search(pattern, line) for line in said):
            missing.append(expected)
    return missing


def documents() -> list[Path]:
    """README.md and every page of the manual."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def find(page: Path) -> list[Block]:
    """The runnable blocks of `page`, in order."""
    lines = page.read_text().splitlines()
    blocks = []
    for index, line in enumerate(lines):
        marker = MARKER.match(line.strip())
        if marker is None:
            continue
        where = f"{page}:{index + 1}"
        fence = FENCE.match(lines[index + 1]) if index + 1 < len(lines) else None
        if fence is None:
            raise BadMarker(f"{where}: a runnable marker must stand on the line just before a ``` fence.")
        language, _, attributes = fence["info"].strip().partition(" ")
        title = TITLE.search(attributes)
        if title is None and language not in LANGUAGES:
            raise BadMarker(f"{where}: Received a runnable {language or 'untyped'} block. Valid: {', '.join(LANGUAGES)}.")
        end = next((i for i in range(index + 2, len(lines)) if lines[i].startswith("```")), None)
        if end is None:
            raise BadMarker(f"{where}: the block has no closing ``` fence.")
        replacements, needs = _options(marker["rest"], where)
        blocks.append(Block(page, index + 2, language, "\n".join(lines[index + 2:end]) + "\n",
                            title["title"] if title else None, replacements, needs))
    return blocks


def _options(rest: str, where: str) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    flags, *clauses = rest.split(";")
    if flags.strip():
        raise BadMarker(f"{where}: Received <!-- runnable{rest} -->. Valid: {FORMS}.")
    replacements, needs = [], []
    for clause in clauses:
        found, extras = REPLACEMENT.match(clause.strip()), NEEDS.match(clause.strip())
        if found is not None:
            replacements.append((found["old"], found["new"]))
        elif extras is not None:
            needs += [extra.strip() for extra in extras["extras"].split(",") if extra.strip()]
        else:
            raise BadMarker(f"{where}: Received the clause {clause.strip()!r}. Valid: {FORMS}.")
    unknown = [extra for extra in needs if extra not in EXTRAS]
    if unknown:
        raise BadMarker(f"{where}: Received needs {', '.join(unknown)}. Valid extras: {', '.join(EXTRAS)}.")
    return tuple(replacements), tuple(needs)


def executed(blocks: list[Block]) -> list[tuple[Block, list[Block]]]:
    """Each block that runs, with the file blocks written before it on its page."""
    return [(block, [b for b in blocks[:i] if b.title]) for i, block in enumerate(blocks) if not block.title]


def once_each(cases: list[tuple[Block, list[Block]]]) -> list[tuple[Block, list[Block]]]:
    """`cases` less the repeats: a block shown on two pages (README's first example is the manual's) runs once,
    where it is first found, when its code, its needs and the files it is given are the same."""
    seen, kept = set(), []
    for block, files in cases:
        key = (block.language, block.prepared(), block.needs, tuple((f.title, f.prepared()) for f in files))
        if key not in seen:
            seen.add(key)
            kept.append((block, files))
    return kept


def run(block: Block, files: list[Block], folder: Path, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run `block` in `folder` (fresh), after writing `files` there, as after the plain install (as_a_user);
    output captured."""
    for name in ("examples", "tests"):
        (folder / name).symlink_to(REPO / name, target_is_directory=True)
    for file in files:
        (folder / file.title).write_text(file.prepared())
    commands = folder / ".commands"
    commands.mkdir()
    for name, line in (("acceltrain", f'exec "{sys.executable}" -m acceltrain "$@"'),
                       ("python", f'exec "{sys.executable}" "$@"'), ("python3", f'exec "{sys.executable}" "$@"')):
        (commands / name).write_text(f"#!/bin/sh\n{line}\n")
        (commands / name).chmod(0o755)
    env = as_a_user(env, folder, block.needs)
    env["PATH"] = f"{commands}:{env.get('PATH', '')}"
    script = folder / f".block-{block.line}.{'py' if block.language == 'python' else 'sh'}"
    script.write_text(block.prepared())
    program = [sys.executable, str(script)] if block.language == "python" else ["bash", "-e", "-o", "pipefail", str(script)]
    return subprocess.run(program, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


HIDDEN = '''"""Written by docs/runnable.py: these modules look uninstalled, as after the plain install."""
import sys

HIDDEN = {hidden!r}


class _Without:
    """A finder of this process, blind to the hidden modules (find_spec None: importlib.util.find_spec says absent,
    an import raises ModuleNotFoundError), as where they were never installed."""

    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            return None
        find = getattr(self.finder, "find_spec", None)
        return find(name, path, target) if find else None

    def find_distributions(self, *args, **kwargs):  # importlib.metadata: not installed either (tensorflow-cpu too)
        find = getattr(self.finder, "find_distributions", None)
        return (found for found in (find(*args, **kwargs) if find else ()) if not _hidden(found))

    def __getattr__(self, name):
        return getattr(self.finder, name)


def _hidden(distribution):
    name = (distribution.metadata["Name"] or "").lower().replace("-", "_").replace(".", "_")
    return any(name == module or name.startswith(module + "_") for module in HIDDEN)


sys.meta_path[:] = [_Without(finder) for finder in sys.meta_path]
'''


def hidden(needs: tuple[str, ...]) -> list[str]:
    """The modules a block that needs these extras must not find: every extra's, less the ones it needs."""
    return sorted({name for extra in EXTRAS.values() for name in extra} - {name for extra in needs for name in EXTRAS[extra]})


def as_a_user(env: dict, folder: Path, needs: tuple[str, ...] = ()) -> dict:
    """`env` as a user's after `pip install acceltrain` plus the extras `needs`: no KERAS_BACKEND, a fresh HOME (no
    keras.json, no caches) in `folder`, and the other extras' modules hidden from every process (PYTHONPATH)."""
    (folder / ".home").mkdir()
    (folder / ".plain-install").mkdir()
    (folder / ".plain-install" / "sitecustomize.py").write_text(HIDDEN.format(hidden=hidden(needs)))
    env = {name: value for name, value in env.items() if name not in ("KERAS_BACKEND", "KERAS_HOME", "XDG_CACHE_HOME")}
    path = os.pathsep.join(p for p in (str(folder / ".plain-install"), env.get("PYTHONPATH")) if p)
    return {**env, "HOME": str(folder / ".home"), "PYTHONPATH": path}


CONNECTED = re.compile(r"acceltrain: (?P<backend>\w+) on (?P<platform>cpu|gpu|tpu)\b")
CONNECTS = ("connect(", "acceltrain run", "acceltrain train", "acceltrain launch")


def backend_lines(block: Block, output: str) -> tuple[str, list[str]]:
    """The backend a user gets from the block (tensorflow where it asks for it, else jax, the plain install's),
    and each line of `output` where connect() names another; a block that connects and printed no such line
    has that said instead."""
    code = block.prepared()
    expected = "tensorflow" if re.search(r"""backend[= ]["']?tensorflow""", code) else "jax"
    said = [(line, found["backend"]) for line in output.splitlines() if (found := CONNECTED.search(line))]
    wrong = [line.strip() for line, backend in said if backend != expected]
    connecting = re.sub(r"acceltrain launch --emit\b.*", "", code)  # emitting an artifact connects to nothing
    if not said and any(command in connecting for command in CONNECTS):
        wrong.append("(no line 'acceltrain: BACKEND on PLATFORM': connect() said nothing)")
    return expected, wrong
