"""Options as values that check and write themselves: `Checkpoints`, the one form of the checkpoint options.

    checkpoints = acceltrain.Checkpoints("ckpt", every="200 steps", keep=3)   # checked here, once
    runtime.fit(model, x, y, epochs=10, checkpoints=checkpoints)
    checkpoints.as_args()   # ['--checkpoint-dir', 'ckpt', '--checkpoint-every', '200 steps', '--keep-checkpoints', '3']

`Runtime.fit(checkpoints=...)`, `acceltrain train`, `run --checkpoint-dir`, `launch` and the emitters all take this one
value (as Orbax's CheckpointManagerOptions is one value): a wrong one is refused when it is made, naming the Python
argument, or the flag while a CLI verb runs (errors.cli_names). Numpy-free: the neutral core.
"""

import contextvars
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from acceltrain.errors import UsageError, positive_int, shown, under_cli

DEFAULT_EVERY = "auto"
DEFAULT_KEEP = 2

# Each field as the user set it: the flag under the CLI; else Checkpoints's argument, or, made by `of`, the keyword
# of Runtime.fit (checkpoint_every=...).
_FLAGS = {"dir": "--checkpoint-dir", "every": "--checkpoint-every", "keep": "--keep-checkpoints", "resume": "--resume"}
_KEYWORDS = {"dir": "checkpoint_dir", "every": "checkpoint_every", "keep": "keep_checkpoints", "resume": "resume"}
_BY_KEYWORDS = contextvars.ContextVar("acceltrain_checkpoints_by_keywords", default=False)


def _named(name: str) -> str:
    """A field as the user set it: its flag under the CLI, else its argument (of Checkpoints, or Runtime.fit's)."""
    return _FLAGS[name] if under_cli() else _KEYWORDS[name] if _BY_KEYWORDS.get() else name


@dataclass(frozen=True)
class Every:
    """How often to checkpoint: every `count` steps, or every `count` epochs; `auto` (the default): every epoch until
    the first checkpoint's cost is measured, then every decisions.choose_checkpoint_epochs epochs."""

    count: int = 1
    unit: str = "epochs"  # "epochs" | "steps"
    auto: bool = False

    @classmethod
    def parse(cls, text: str, name: str = "--checkpoint-every") -> "Every":
        """'auto' → Every(auto=True); '2' or '2 epochs' → every 2 epochs; '100 steps' → every 100 steps. `name`: what
        the user set, the CLI flag or the Python argument, named in the error. Called by Checkpoints alone."""
        if str(text).strip() == "auto":
            return cls(auto=True)
        match = re.fullmatch(r"\s*(\d+)\s*(steps?|epochs?)?\s*", str(text))
        if not match or int(match.group(1)) < 1:
            raise UsageError(f"Received {shown(name, text)}. Expected 'auto' (the default) or a count and a unit, e.g. "
                             "'1 epoch', '3 epochs' or '200 steps'.")
        unit = "steps" if (match.group(2) or "epochs").startswith("step") else "epochs"
        return cls(int(match.group(1)), unit)


@dataclass(frozen=True)
class Checkpoints:
    """Where and how a fit keeps checkpoints, checked when it is made.

    Args:
        dir: the folder the checkpoints go in (a new one, or one an earlier run checkpointed into, with `resume`).
        every: "auto" (every epoch until the first checkpoint's write is measured, then as often as keeps its cost
            near 2 % of training, at most 5 minutes of training apart: decisions.choose_checkpoint_epochs and
            choose_checkpoint_steps), or "N epochs" or "N steps".
        keep: the newest checkpoints kept (older ones are deleted once a newer one is written whole).
        resume: continue from the newest good checkpoint in `dir`, exactly where it stopped.

    Raises UsageError naming the argument (the flag under the CLI) when a value is wrong.
    """

    dir: str | os.PathLike  # kept as a str
    every: str = DEFAULT_EVERY
    keep: int = DEFAULT_KEEP
    resume: bool = False
    cadence: Every = field(init=False, repr=False, compare=False)  # `every`, parsed: the one Every.parse

    def __post_init__(self):
        if not isinstance(self.dir, (str, os.PathLike)) or not str(self.dir):
            raise UsageError(f"Received {shown(_named('dir'), self.dir)}. Expected the path of a folder for the "
                             "checkpoints (a new one, or one an earlier run checkpointed into, with resume).")
        if not isinstance(self.resume, bool):
            raise UsageError(f"Received {shown(_named('resume'), self.resume)}. Expected True (continue from the "
                             "newest checkpoint) or False (start over in a new or empty folder).")
        every = str(self.every).strip()
        object.__setattr__(self, "dir", os.fspath(self.dir))  # a str as given: a bucket's URL stays whole
        object.__setattr__(self, "cadence", Every.parse(every, _named("every")))
        object.__setattr__(self, "every", every)
        object.__setattr__(self, "keep", positive_int(self.keep, _named("keep")))

    @classmethod
    def of(cls, dir, every: str | None = None, keep: int | None = None, resume: bool = False, *,
           here: bool = False) -> "Checkpoints | None":
        """The options given one by one, as a command reads its flags and Runtime.fit its keywords (None: not given,
        the default); None without `dir`, where none of the others may be given. Errors name the flags under the
        CLI, else Runtime.fit's keywords (checkpoint_every=...). `here`: the folder is this machine's, checked
        writable now (Runtime.fit's; not an emitted job's, whose folder is on the cluster)."""
        token = _BY_KEYWORDS.set(True)
        try:
            made = cls._of(dir, every, keep, resume)
            return made.check_writable() if here and made is not None else made
        finally:
            _BY_KEYWORDS.reset(token)

    @classmethod
    def _of(cls, dir, every, keep, resume) -> "Checkpoints | None":
        if dir is None:
            given = {"resume": resume, "every": every, "keep": keep}
            for name, value in given.items():
                if value not in (None, False):
                    flag = _named(name)
                    folder = _named("dir") + (" DIR" if under_cli() else "")
                    raise UsageError(f"Received {flag} without {_named('dir')}. Pass {folder} too (the folder the "
                                     f"checkpoints go in), or leave out {flag}.")
            return None
        return cls(dir, DEFAULT_EVERY if every is None else every, DEFAULT_KEEP if keep is None else keep, bool(resume))

    @property
    def folder(self) -> Path:
        """`dir` as a local path (`dir` itself is kept as a str, as given: an emitted job's may be a bucket's URL)."""
        return Path(self.dir)

    def check_folder(self) -> "Checkpoints":
        """The folder as it is here, before anything starts or is written: a folder (not a file), and empty unless
        resuming. Not for an emitted job's, whose folder is on the cluster."""
        folder = self.check_writable().folder
        held = sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []
        if held and not self.resume:
            listed = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
            raise UsageError(f"Received {shown(_named('dir'), str(folder))}, which already holds files ({listed}). "
                             f"Pass {_named('resume')} to continue from its checkpoints, or a new or empty folder to "
                             "start over.")
        return self

    def check_writable(self) -> "Checkpoints":
        """The folder, or the nearest one above it that exists, is a folder this process can write into: refused
        before a fit starts, not at its first checkpoint (a local path; a bucket's URL is left to its writer)."""
        if "://" in self.dir:
            return self
        folder = self.folder
        if folder.exists() and not folder.is_dir():
            raise UsageError(f"Received {shown(_named('dir'), str(folder))}, which is a file. Pass a folder (new, or "
                             f"one an earlier run checkpointed into, with {_named('resume')}).")
        problem = unwritable(folder.absolute())
        if problem:
            raise UsageError(f"Received {shown(_named('dir'), str(folder))}, but {problem}. Pass a folder you can "
                             "write to.")
        return self

    def as_args(self) -> list[str]:
        """These options as `acceltrain run`'s flags, the defaults left out: what `launch` passes to each process and
        an emitted job runs."""
        args = ["--checkpoint-every", self.every] if self.every != DEFAULT_EVERY else []
        args += ["--keep-checkpoints", str(self.keep)] if self.keep != DEFAULT_KEEP else []
        return [*args, "--checkpoint-dir", os.fspath(self.dir), *(["--resume"] if self.resume else [])]


def unwritable(folder: Path) -> str | None:
    """Why nothing can be written into `folder` or, where it does not exist yet, into the nearest folder above it (the
    one that would hold it), or None. os.access says yes to root even on a read-only mount: a temporary file is tried
    for real, and leaves nothing behind. The one check of checkpoints' folders, --out, --ledger and --json."""
    existing = Path(folder)
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{str(existing)!r} is a file, not a folder"
    try:
        with tempfile.TemporaryFile(dir=existing):
            return None
    except OSError as error:
        return f"{str(existing)!r} is not writable ({error.strerror})"
