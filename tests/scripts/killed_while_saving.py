"""Writes a checkpoint (epoch 1), starts writing the next (epoch 2), and is SIGKILLed while Orbax writes it
in the background: as a preempted VM or an OOM kill would end a run mid-save.

    python killed_while_saving.py FOLDER
"""

import os
import signal
import sys

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
os.kill(os.getpid(), signal.SIGKILL)  # while the background thread writes epoch 2
