"""The benchmark scripts: each measures, writes its record to benchmarks/results/<section>.json, and renders it.

BENCHMARKS.md and the measured figures of README.md (and docs/*.md) are made from the committed records by
`python benchmarks/render.py`; `python benchmarks/run_all.py` reruns every benchmark and renders. A package so
that render.py and the tests import the scripts; each still runs as `python benchmarks/NAME.py`.
"""
