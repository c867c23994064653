"""`acceltrain run --checkpoint-dir DIR SCRIPT.py`: the script's fit calls made exact and resumable.

    checkpoints = acceltrain.Checkpoints("ckpt", every="200 steps")   # the flags, as the CLI reads them

Each `model.fit` the script makes is trained by the runtime's own loop (slot "trained" of the one assembly,
assembly.py::Trained, as Runtime.fit(checkpoint_dir=...) is; training/resumable.py) with the script's own
arguments: SIGTERM or SIGINT finishes the step, writes a checkpoint and stops the
script with the resume hint; the same command plus --resume continues exactly where it stopped.

- The Nth fit call of the script keeps its checkpoints in DIR/fit-N. On --resume every fit restores
  its own: one that had finished trains no further (its final weights are restored), the one that was
  stopped continues, those that had not started start. So a script with several fits (pretraining,
  then fine-tuning) resumes too, provided it makes them in the same order each run.
- What exact resume cannot honour is refused before training, naming the argument: inputs that cannot
  be rewound (a generator, a Grain dataset), `steps_per_epoch`, `initial_epoch`,
  `shuffle="batch"`. The way out is to run without --checkpoint-dir. (`sample_weight` follows its samples
  through each epoch's order; `validation_split` is made once, before the first epoch.)
- Differences from the script's plain fit, all of the runtime's own loop: each epoch's order is drawn
  from (seed 0, epoch) rather than by Keras; the few samples that would make a last batch uneven over
  the replicas are left out of each epoch after its shuffle; the run stops with TrainingDiverged when
  the loss is NaN or stuck at chance. The script's callbacks see one training run
  (`on_train_begin` and `on_train_end` once: resumable._one_training_run), though Keras's fit is called
  once an epoch; on resume, their own state (EarlyStopping's patience count) starts afresh.
"""


def resume_hint(checkpoints, resume_command: str) -> str:
    """How the user resumes a script stopped by a signal (`resume_command`: the user's command plus --resume)."""
    again = "the same command, as it is" if checkpoints.resume else "the same command plus --resume"
    return f"{again} ({resume_command})"
