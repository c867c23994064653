"""BENCHMARKS.md, and the measured figures of README.md and docs/*.md, made from the committed records.

    python benchmarks/render.py           # rewrite them from benchmarks/results/*.json
    python benchmarks/render.py --check   # rewrite nothing; exit 1 naming each file that differs
    python benchmarks/render.py --list    # every quote a marker can name, with its text now

Runs no benchmark. Each section is rendered by the script that measures it (sections.py lists them):
`summarize(raw)`, then `render(summary, record)`, with the record's provenance (date, machine, load,
versions; or the source of a transcribed record) under its heading. A record marked quick is refused, and so
is a measured one that names no commit or an uncommitted tree ("<commit>+changes").

Elsewhere (README.md, docs/**/*.md) a measured figure or sentence sits between markers that name its
section and quote; this script writes what is between them, and for a record taken on a loaded machine
(_results.loaded) says that the figure waits for a quiet rerun instead, unless the quote is load-free (its
script's LOAD_FREE):

    acceltrain's epoch was <!-- measured:epoch-speed/acceltrain-vs-hand -->...<!-- /measured --> the loop's.

`quote(section, name)` returns the same text to any other tool (a docs plugin, a notebook).
"""

import argparse
import collections
import importlib
import re
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _results  # noqa: E402
from benchmarks.sections import BY_NAME, SECTIONS  # noqa: E402

REPO = _results.REPO
BENCHMARKS_MD = REPO / "BENCHMARKS.md"
MARKER = re.compile(r"(<!-- measured:(?P<section>[\w-]+)/(?P<name>[\w-]+) -->)(?P<content>.*?)(<!-- /measured -->)", re.S)


class RefusedRecord(Exception):
    """A record that must not be rendered into the committed files."""


def script_module(script: str):
    return importlib.import_module(f"benchmarks.{Path(script).stem}")


def records(folder: Path = _results.RESULTS, allow_quick: bool = False) -> dict:
    """Each section's record in `folder` (None: not measured yet). A quick record is refused by name, unless
    `allow_quick` (run_all.py --quick renders quick records into a temporary folder)."""
    found = {}
    for section in SECTIONS:
        path = folder / f"{section.name}.json"
        record = _results.load(path) if path.exists() else None
        if record is not None and record.get("quick") and not allow_quick:
            raise RefusedRecord(f"{path} is a --quick run's record (tiny settings, a pipeline check): it must not "
                                f"be rendered into the committed files. Rerun `{section.command}` in full, or "
                                "restore the committed record with `git checkout -- benchmarks/results`.")
        if record is not None and not allow_quick:
            _refuse_uncommitted(path, record, section.command)
        if record is not None and record.get("section") != section.name:
            raise RefusedRecord(f"{path} holds section {record.get('section')!r}, not {section.name!r}")
        found[section.name] = record
    return found


def _refuse_uncommitted(path: Path, record: dict, command: str) -> None:
    """A measured record must name the commit it measured: one taken on a tree with uncommitted changes
    ("<commit>+changes"), or with no commit at all, describes code nobody can check out."""
    if record["provenance"] != _results.MEASURED:
        return
    commit = (record.get("versions") or {}).get("commit")
    if commit is None or commit.endswith(_results.UNCOMMITTED):
        said = f"on a tree with uncommitted changes ({commit})" if commit else "with no commit recorded"
        raise RefusedRecord(f"{path} was measured {said}: its figures may describe code that no commit holds, so "
                            f"it is not rendered. Commit your changes, then rerun `{command}` on the clean tree "
                            "(`git status --untracked-files=no` shows nothing), and render again.")


def usual_machine(found: dict) -> dict | None:
    """The CPU (model and cores) most sections ran on: a section on another says so."""
    machines = [record["machine"] for record in found.values() if record and _results.same_cpu(record["machine"])]
    if not machines:
        return None
    counts = collections.Counter(_results.same_cpu(m) for m in machines)
    cpu, cores = counts.most_common(1)[0][0]
    return {"cpu": cpu, "cores": cores}


def section_text(name: str, record: dict | None, usual: dict | None) -> str:
    section = BY_NAME[name]
    if record is None:
        where = " on a machine with a GPU (benchmarks/gpu_check.sh sets one up and runs it)" if section.needs else ""
        return (f"## {name}\n\nNot measured yet: `{section.command}`{where} writes its record "
                f"(benchmarks/results/{name}.json).")
    module = script_module(section.script)
    heading, _, body = module.render(_results.summary_of(record, module.summarize), record).partition("\n")
    return f"{heading}\n\n{_results.provenance(record, usual)}\n{body.rstrip()}"


def benchmarks_md(found: dict) -> str:
    usual = usual_machine(found)
    measured = [name for name, record in found.items() if record and record["provenance"] == _results.MEASURED]
    transcribed = [name for name, record in found.items() if record and record["provenance"] != _results.MEASURED]
    missing = [name for name, record in found.items() if record is None]
    status = [f"{len(measured)} of {len(found)} sections measured from their scripts' records"]
    if transcribed:
        status.append(f"transcribed from an earlier BENCHMARKS.md, awaiting a rerun: {', '.join(transcribed)}")
    if missing:
        status.append(f"not measured yet: {', '.join(missing)}")
    loaded = [name for name, record in found.items() if record and _results.loaded(record)]
    if loaded:
        status.append(f"taken on a loaded machine, so README and the manual quote none of their times until a quiet "
                      f"rerun, `python benchmarks/run_all.py --only {' '.join(loaded)}`: {', '.join(loaded)}")
    header = ("# Benchmarks\n\n"
              "Written by `python benchmarks/render.py` from the records in `benchmarks/results/` (one per section: "
              "the command, its date, the machine and its load, the versions, every figure measured); not edited "
              "by hand, and a test checks it. `python benchmarks/run_all.py` reruns every benchmark and rewrites "
              f"it. {'; '.join(status)}.")
    if usual:
        header += f" Most sections ran on {usual['cores']} cores of {usual['cpu']}."
    parts = [header]
    for name, record in found.items():
        parts.append(f"<!-- {name}:begin -->\n{section_text(name, record, usual)}\n<!-- {name}:end -->")
    return "\n\n".join(parts) + "\n"


def quotes(found: dict) -> dict:
    """(section, name) → the text of each quote every section's script offers. A loaded record's quotes are
    withheld (`_results.withheld`: why, and the rerun), but those its script lists in LOAD_FREE."""
    said = {}
    for name, record in found.items():
        module = script_module(BY_NAME[name].script)
        if record is None or not hasattr(module, "quotes"):
            continue
        load_free = getattr(module, "LOAD_FREE", ())
        for key, text in module.quotes(_results.summary_of(record, module.summarize), record).items():
            said[name, key] = _results.withheld(record) if _results.loaded(record) and key not in load_free else text
    return said


def quote(section: str, name: str, folder: Path = _results.RESULTS) -> str:
    """One quote's text, as the markers get it."""
    return _quote_text(quotes(records(folder)), section, name)


def _quote_text(said: dict, section: str, name: str) -> str:
    if section not in BY_NAME:
        raise KeyError(f"Received a marker for section {section!r}. Valid sections: {', '.join(BY_NAME)}.")
    if (section, name) in said:
        return said[section, name]
    offered = sorted(key for sec, key in said if sec == section)
    if not offered:
        return f"(not measured yet: BENCHMARKS.md, section {section})"
    raise KeyError(f"Received a marker for {section}/{name}. The section offers: {', '.join(offered)}.")


def fill_markers(text: str, said: dict) -> str:
    """`text` with the content of every measured marker rewritten from the records."""
    return MARKER.sub(lambda m: m.group(1) + _quote_text(said, m["section"], m["name"]) + m.group(5), text)


def documents() -> list[Path]:
    """The files whose markers this script fills: README.md and the manual's pages."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def rendered(folder: Path = _results.RESULTS) -> dict[Path, str]:
    """Every file this script writes, with the text the records give it."""
    found = records(folder)
    said = quotes(found)
    texts = {BENCHMARKS_MD: benchmarks_md(found)}
    for path in documents():
        if path.exists():
            texts[path] = fill_markers(path.read_text(), said)
    return texts


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file differs")
    parser.add_argument("--list", action="store_true", help="print every SECTION/NAME a marker can quote, and its text")
    args = parser.parse_args(argv)
    try:
        if args.list:
            for (section, name), text in quotes(records()).items():
                print(f"<!-- measured:{section}/{name} -->  {text.strip()[:200]}")
            return 0
        texts = rendered()
    except (RefusedRecord, KeyError) as refused:
        print(f"render: error: {refused.args[0]}", file=sys.stderr)
        return 2
    stale = [path for path, text in texts.items() if not path.exists() or path.read_text() != text]
    for path in stale:
        if args.check:
            print(f"render: {_shown(path)} differs from what benchmarks/results/ gives", file=sys.stderr)
        else:
            path.write_text(texts[path])
            print(f"render: rewrote {_shown(path)}", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
