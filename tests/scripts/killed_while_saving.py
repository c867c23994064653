"""Writes a checkpoint (epoch 1), starts writing the next (epoch 2), and is SIGKILLed while Orbax writes it
in the background: as a preempted VM or an OOM kill would end a run mid-save.

    python killed_while_saving.py FOLDER
"""

import os
import signal
import sys
import time
from pathlib import Path

import acceltrain

acceltrain.connect(verbose=False)

import keras  # noqa: E402

from acceltrain.training.checkpoint import State  # noqa: E402
from acceltrain.training.sharded_checkpoint import ShardedCheckpoints  # noqa: E402

# 4M weights (16 MB) and Adam's two slots: tens of milliseconds of writing at the least.
model = keras.Sequential([keras.Input((2048,)), keras.layers.Dense(2048)])
model.compile("adam", "mse")
model.optimizer.build(model.trainable_variables)
checkpoints = ShardedCheckpoints(sys.argv[1], keep=2)
checkpoints.save(model, State(epoch=1))
checkpoints.close()  # epoch 1 is whole on disk
checkpoints.save(model, State(epoch=2))  # returns once the arrays are in host memory
# Orbax makes the temporary folder in the background too: on a loaded machine a kill at once could land before it
# exists. Wait for it, then kill while the write goes on (exit 3, for the test to report, if it ended first).
folder = Path(sys.argv[1])
while not any(".orbax-checkpoint-tmp" in path.name for path in folder.iterdir()):
    if (folder / "epoch-0002-step-00000").exists():
        sys.exit(3)
    time.sleep(0.001)
os.kill(os.getpid(), signal.SIGKILL)  # while the background thread writes epoch 2
