"""Ends as its command line says: `exits.py code N` calls sys.exit(N); `exits.py raise` raises."""

import sys


def fail():
    raise ValueError("the script's own error")


if sys.argv[1] == "code":
    print(f"argv: {sys.argv}")
    sys.exit(int(sys.argv[2]))
fail()
