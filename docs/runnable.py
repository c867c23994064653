"""The manual's runnable blocks: found in README.md and docs/**/*.md, executed by tests/docs/test_runnable.py.

A fenced block is runnable when the line just before its fence is one of these comments:

    <!-- runnable -->                               run as written, in the default (CI) test set
    <!-- runnable slow -->                          run only under `pytest -m slow` (it trains for a while)
    <!-- runnable; "--epochs 20" → "--epochs 1" --> run with that text replaced first (shortened); each
                                                    replacement must occur, so a stale one fails

In a bash block, a comment `#   acceltrain: ...` (three spaces), with the comments of five spaces under it joined on,
is a line the command before it prints: the block's output must hold a line matching it (runs of spaces alike, `...`
standing for any text). So an example output on a page is what that command printed the last time the test ran.

A page's blocks run in order, in one fresh folder: a block with a title (```python title="train.py"```,
```toml title="run.toml"```) is written to that file, for a later block to use, and not run itself; an
untitled python block runs with this Python; an untitled bash block runs with `acceltrain`, `python` and
`python3` meaning this Python and this source tree. The
folder links the repository's examples/ and tests/, so a block may name examples/plain_mnist.py.
"""

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LANGUAGES = ("python", "bash")
MARKER = re.compile(r"^<!-- runnable(?P<rest>.*?) -->$")
REPLACEMENT = re.compile(r'^"(?P<old>[^"]+)"\s*(?:→|->)\s*"(?P<new>[^"]*)"$')
FENCE = re.compile(r"^```(?P<info>.*)$")
TITLE = re.compile(r'title="(?P<title>[^"]+)"')
FORMS = '<!-- runnable -->, <!-- runnable slow -->, each optionally followed by ; "old" → "new"'


class BadMarker(ValueError):
    """A runnable marker this module cannot read: the message names the page, the line and the forms."""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    title: str | None = None  # the file the block is written to, instead of being run
    slow: bool = False
    replacements: tuple[tuple[str, str], ...] = ()

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
        slow, replacements = _options(marker["rest"], where)
        blocks.append(Block(page, index + 2, language, "\n".join(lines[index + 2:end]) + "\n",
                            title["title"] if title else None, slow, replacements))
    return blocks


def _options(rest: str, where: str) -> tuple[bool, tuple[tuple[str, str], ...]]:
    flags, *clauses = rest.split(";")
    if flags.strip() not in ("", "slow"):
        raise BadMarker(f"{where}: Received <!-- runnable{rest} -->. Valid: {FORMS}.")
    replacements = []
    for clause in clauses:
        found = REPLACEMENT.match(clause.strip())
        if found is None:
            raise BadMarker(f"{where}: Received the replacement {clause.strip()!r}. Valid: {FORMS}.")
        replacements.append((found["old"], found["new"]))
    return flags.strip() == "slow", tuple(replacements)


def executed(blocks: list[Block]) -> list[tuple[Block, list[Block]]]:
    """Each block that runs, with the file blocks written before it on its page."""
    return [(block, [b for b in blocks[:i] if b.title]) for i, block in enumerate(blocks) if not block.title]


def run(block: Block, files: list[Block], folder: Path, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run `block` in `folder` (fresh), after writing `files` there; output captured."""
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
    env = {**env, "PATH": f"{commands}:{env.get('PATH', '')}"}
    script = folder / f".block-{block.line}.{'py' if block.language == 'python' else 'sh'}"
    script.write_text(block.prepared())
    program = [sys.executable, str(script)] if block.language == "python" else ["bash", "-e", "-o", "pipefail", str(script)]
    return subprocess.run(program, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)
