"""Every section of BENCHMARKS.md, in its order: the script that measures it and its full run's arguments.

Adding a benchmark is three steps:
1. benchmarks/NAME.py: parse its flags with `_results.add_arguments` (--quick: tiny settings), measure,
   `_results.Run(__file__, args).save(SECTION, raw)`; and beside the measuring, `summarize(raw)` (the
   figures to print; comparisons judged by `_noise`), `render(summary, record)` (the section, its first
   line the heading) and, for figures quoted elsewhere, `quotes(summary, record)`;
2. one line here;
3. `python benchmarks/run_all.py --only SECTION` on a quiet machine, then commit results/SECTION.json and
   what render.py rewrote. Until then its section says it has not been measured.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Section:
    name: str
    script: str
    args: tuple = ()  # the full run's arguments (the committed record's command)
    minutes: float = 5  # the full run's wall time on a quiet 2-core machine, roughly: to schedule reruns
    needs: str | None = None  # "gpu": runs only where there is one (benchmarks/gpu_check.sh sets it up)

    @property
    def command(self) -> str:
        return " ".join(["python", f"benchmarks/{self.script}", *self.args])


# Minutes: from the old sections' own timings where they gave them (stress, corpus, plan-cost), else from
# their settings and the epoch times they reported; `run_all.py` prints each run's wall time to correct them.
SECTIONS = (
    Section("learning-rate", "learning_rate.py", (), 12),
    Section("epoch-speed", "epoch_speed.py", (), 16),  # batch 32, 128 and 1,200: 5, 4 and 2 runs of each of 5 variants
    Section("epoch-speed-tensorflow", "epoch_speed.py", ("--backend", "tensorflow"), 19),
    Section("default-job", "default_job.py", (), 8),
    Section("fit-options", "fit_options.py", (), 4),
    Section("matmul-dtypes", "matmul_dtypes.py", (), 1),
    Section("checkpoint-cost", "checkpoint_cost.py", (), 8),
    Section("compile-cache", "compile_cache.py", (), 4),
    Section("preemption", "preemption.py", (), 6),
    Section("sharding-memory", "sharding_memory.py", (), 4),
    Section("auto-placement", "auto_placement.py", (), 6),
    Section("plan-cost", "plan_cost.py", (), 6),
    Section("plan-lm", "plan_lm.py", (), 10),
    Section("stress-simulated", "stress_simulated.py", ("--runs", "10", "--epochs", "3"), 12),
    Section("simulated-devices", "simulated_devices.py", ("--devices", "1", "2", "4", "8", "--rounds", "3"), 60),
    Section("corpus", "corpus.py", (), 30),
    Section("verify-tolerance", "verify_tolerance.py", (), 4),
    Section("small-steps", "small_steps.py", (), 15),
    Section("small-steps-lstm", "small_steps.py", ("--models", "lstm", "--section", "small-steps-lstm"), 15),
    # Issue 45's IMDB-shaped text classifier under launch only, against plain Keras's own 2-process fit (the floor).
    Section("small-steps-bilstm", "small_steps.py", ("--models", "bilstm", "--places", "launch", "--section",
                                                     "small-steps-bilstm"), 15),
    Section("epoch-speed-gpu", "epoch_speed.py", ("--section", "epoch-speed-gpu", "--epochs", "6", "--repeats", "2"), 6,
            needs="gpu"),
    Section("lm-finetune-gpu", "lm_finetune.py", (), 5, needs="gpu"),
)
BY_NAME = {section.name: section for section in SECTIONS}
