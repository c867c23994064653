"""Each process of a job asks ShardedCheckpoints.agree for 5 + its index (so they differ) and writes what it got to
OUT/agreed-<index>.txt: process 0's value, on every process, is what 'auto' checkpoint cadence relies on.

    acceltrain launch --processes 2 agree_across_processes.py OUT
"""

import sys
from pathlib import Path

import acceltrain

runtime = acceltrain.connect(verbose=False)

from acceltrain.training.sharded_checkpoint import ShardedCheckpoints  # noqa: E402  (after connect)

out = Path(sys.argv[1])
agreed = ShardedCheckpoints(out / "checkpoints").agree(5 + runtime.process_index)
(out / f"agreed-{runtime.process_index}.txt").write_text(str(agreed))
