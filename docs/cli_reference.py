"""docs/reference/cli.md, written from the `acceltrain` command's own argparse parser.

    python docs/cli_reference.py           # rewrite the page
    python docs/cli_reference.py --check   # write nothing; exit 1 if the committed page differs

A flag added to acceltrain.cli without rewriting the page fails tests/docs/test_cli_reference.py, and so does
a flag the page lists that the parser lacks: the reference cannot drift from the command.
"""

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `docs` importable from the repository's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PAGE = Path(__file__).resolve().parent / "reference" / "cli.md"
WIDTH = 100  # usage lines are wrapped at this width, whatever the terminal that writes the page


def verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of `parser`, in the order `acceltrain --help` lists them."""
    (subparsers,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return dict(subparsers.choices)


def summaries(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each verb's one-line help, as `acceltrain --help` shows it."""
    (subparsers,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return {choice.dest: choice.help for choice in subparsers._choices_actions}


def usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip()


def argument_name(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(action.option_strings)
        if action.nargs == 0:
            return f"`{names}`"
        return f"`{names} {action.metavar or action.dest.upper()}`"
    return f"`{action.metavar or action.dest}`"


def argument_help(action: argparse.Action) -> str:
    # argparse's help is a %-format (its `%%` prints `%`): expanded as `acceltrain -h` shows it, then a table cell.
    text = (action.help or "") % {"default": action.default, "prog": "acceltrain", "dest": action.dest}
    text = text.replace("|", "\\|").replace("<", "&lt;")
    if action.required and action.option_strings:
        text += " (required)"
    shown_default = action.default not in (None, False, argparse.SUPPRESS) and "default" not in text
    if shown_default and not isinstance(action, argparse._HelpAction):
        text += f" (default: {action.default})"
    return text


def verb_section(name: str, parser: argparse.ArgumentParser) -> str:
    rows = [f"| {argument_name(action)} | {argument_help(action)} |"
            for action in parser._actions if not isinstance(action, argparse._HelpAction)]
    return "\n".join([
        f"## acceltrain {name}",
        "",
        parser.description or "",
        "",
        "```text",
        usage(parser),
        "```",
        "",
        "| argument | what it does |",
        "|---|---|",
        *rows,
        "",
        "```text",
        (parser.epilog or "").strip(),
        "```",
    ])


def page() -> str:
    from acceltrain import cli

    parser = cli._parser()
    found = verbs(parser)
    index = [f"| [`{name}`](#acceltrain-{name}) | {help} |" for name, help in summaries(parser).items()]
    exit_codes = cli.__doc__.split("\n\n", 1)[1].strip()
    return "\n".join([
        "# Command line",
        "",
        "<!-- Written by `python docs/cli_reference.py` from acceltrain.cli's parser: edit the parser, not this "
        "page. -->",
        "",
        f"{parser.description} Every command takes `-h` for its help, `-q` to print results and errors only, and "
        "`-v` to add details and an error's traceback.",
        "",
        exit_codes,
        "",
        "| command | what it does |",
        "|---|---|",
        *index,
        "",
        *(verb_section(name, verb) + "\n" for name, verb in found.items()),
    ]).rstrip() + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page differs")
    args = parser.parse_args(argv)
    text = page()
    if PAGE.exists() and PAGE.read_text() == text:
        return 0
    if args.check:
        print(f"cli_reference: {PAGE} differs from what acceltrain.cli's parser gives", file=sys.stderr)
        return 1
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text)
    print(f"cli_reference: rewrote {PAGE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
