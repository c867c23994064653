"""One-line messages to stderr: the banner, each 'auto' decision with its reason, notes and warnings.

stdout stays for results (JSON, test accuracy), so `acceltrain devices --json | jq` works.
"""

import sys

_quiet = False


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


def info(message: str) -> None:
    if not _quiet:
        print(f"acceltrain: {message}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    print(f"acceltrain: warning: {message}", file=sys.stderr, flush=True)
