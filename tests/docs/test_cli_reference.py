"""The command-line reference (docs/reference/cli.md) is what acceltrain.cli's parser gives: a flag added to
the parser without rewriting the page fails here, and so does a flag the page lists that no verb has. The
fix: `python docs/cli_reference.py`."""

import re

from acceltrain import cli
from docs import cli_reference

FIX = "run `python docs/cli_reference.py` and commit the page it writes"


def flags_by_verb_on_the_page(text: str) -> dict[str, set[str]]:
    """Each `## acceltrain VERB` section's flags, read from its table's first column."""
    found = {}
    for section in re.split(r"^## acceltrain ", text, flags=re.M)[1:]:
        verb, _, body = section.partition("\n")
        cells = re.findall(r"^\| `([^`]+)` \|", body, flags=re.M)
        found[verb] = {name for cell in cells for name in re.findall(r"(?<![\w-])--?[\w-]+", cell)}
    return found


def flags_by_verb_in_the_parser() -> dict[str, set[str]]:
    return {name: {flag for action in verb._actions for flag in action.option_strings if flag not in ("-h", "--help")}
            for name, verb in cli_reference.verbs(cli._parser()).items()}


def test_the_committed_page_is_what_the_parser_gives():
    assert cli_reference.PAGE.read_text() == cli_reference.page(), f"docs/reference/cli.md is stale: {FIX}"


def test_every_flag_of_every_verb_is_on_the_page_and_the_page_has_no_other():
    on_page, in_parser = flags_by_verb_on_the_page(cli_reference.PAGE.read_text()), flags_by_verb_in_the_parser()
    assert set(on_page) == set(in_parser), f"verbs differ: {FIX}"
    for verb, flags in in_parser.items():
        assert flags - on_page[verb] == set(), f"acceltrain {verb}: flags missing from the page: {FIX}"
        assert on_page[verb] - flags == set(), f"acceltrain {verb}: the page lists flags the parser lacks: {FIX}"


def test_the_reading_of_the_page_finds_flags_and_their_short_forms():
    page = "## acceltrain x\n\n| `-q, --quiet` | q |\n| `--checkpoint-every N [epochs|steps]` | c |\n| `DIR` | d |\n"
    assert flags_by_verb_on_the_page(page) == {"x": {"-q", "--quiet", "--checkpoint-every"}}


def test_check_mode_names_a_stale_page(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli_reference, "PAGE", tmp_path / "cli.md")
    (tmp_path / "cli.md").write_text("# Command line\n")
    assert cli_reference.main(["--check"]) == 1
    assert "differs" in capsys.readouterr().err
    assert (tmp_path / "cli.md").read_text() == "# Command line\n"  # --check writes nothing
    assert cli_reference.main([]) == 0 and cli_reference.main(["--check"]) == 0


def test_the_page_shows_help_as_argparse_prints_it_not_its_format_escapes():
    """argparse's help is a %-format: `2%%` prints `2%` in `acceltrain train -h`, and so on the page."""
    page = cli_reference.PAGE.read_text()
    assert "%%" not in page and "over 2% of the time" in page
