"""Measuring in a fresh Python process, so that one variant's memory or compiled programs never reach the next.

    runs = _child.interleaved(variants, repeats, lambda settings: _child.run(CHILD, settings, timeout=900))

A child is a snippet that reads its settings (JSON) from its first argument and prints its figures as JSON on its
last line.
"""

import json
import subprocess
import sys


def run(code: str, settings: dict, timeout: float) -> dict:
    """`python -c code settings`: the JSON of its last line; its stderr's end in the error when it fails."""
    result = subprocess.run([sys.executable, "-c", code, json.dumps(settings)], capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def interleaved(variants: dict, repeats: int, measure) -> dict:
    """{key: {"label", "settings", "runs"}} with `repeats` runs each, `measure(settings)`, the variants interleaved
    round by round, so that the machine's drift falls on every variant alike; each run printed as it ends."""
    for _ in range(repeats):
        for variant in variants.values():
            variant["runs"].append(measure(variant["settings"]))
            print(variant["label"], variant["runs"][-1], file=sys.stderr, flush=True)
    return variants
