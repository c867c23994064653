"""The output folder: checked before training, written atomically after.

Every file lands by write-to-a-temporary-file-in-the-same-folder, flush, rename: a reader (or a run
killed half-way) sees the old file or the new one, never half of one.
"""

import contextlib
import json
import os
import shutil
import time
from pathlib import Path

from acceltrain.errors import UsageError
from acceltrain.options import unwritable


def default_out_dir() -> Path:
    return Path("runs") / time.strftime("%Y%m%d-%H%M%S")


def check_writable(out_dir: Path) -> None:
    """Fail now, before any training, if `out_dir` cannot be created or written. Creates nothing."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"Received --out {str(out_dir)!r}, which is a file. Pass a folder (new or existing).")
    problem = unwritable(out_dir)
    if problem:
        raise UsageError(f"Received --out {str(out_dir)!r}, but {problem}. Pass a folder you can write to.")


def check_file_folder(path, flag: str) -> None:
    """A file to write (--ledger, --json): not a folder, in a folder that exists and takes a new file. Said before
    anything runs: the run's figures come at its end, and a path that cannot take them would lose them."""
    if path is None:
        return
    path = Path(path)
    problem = _unwritable_file(path)
    if problem:
        raise UsageError(f"Received {flag} {str(path)!r}, but {problem}. Pass a file path in a folder you can write "
                         "to.")


def _unwritable_file(path: Path) -> str | None:
    """Why `path` cannot be written as a file, or None."""
    if path.is_dir():
        return "it is a folder"
    folder = path.resolve().parent
    if not folder.is_dir():
        return "its folder does not exist"
    problem = unwritable(folder)
    return problem and f"its folder {problem}"


def check_free_space(out_dir: Path, bytes_needed: int) -> None:
    """Fail before training if the disk cannot hold the checkpoints and outputs."""
    existing = Path(out_dir)
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if free < bytes_needed:
        raise UsageError(f"--out {str(out_dir)!r} has {free / 1e6:.1f} MB free, but this run's checkpoints and "
                         f"outputs need about {bytes_needed / 1e6:.1f} MB. Free some space, pass another --out, or "
                         "keep fewer checkpoints (--keep-checkpoints 1).")


@contextlib.contextmanager
def atomic_path(path: Path):
    """Yield a temporary path beside `path` (same suffixes, which Keras checks); rename it on success."""
    path = Path(path)
    temporary = path.with_name(f".{path.stem.split('.')[0]}.{os.getpid()}.partial{''.join(path.suffixes)}")
    try:
        yield temporary
        with open(temporary, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_json(path: Path, value) -> None:
    with atomic_path(path) as temporary:
        temporary.write_text(json.dumps(value, indent=2, default=_jsonable) + "\n")


def _jsonable(value):
    try:
        return value.item()  # numpy and framework scalars
    except AttributeError:
        return str(value)
