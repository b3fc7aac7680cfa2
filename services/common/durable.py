"""Durable file writes: a file is either its old content or its new one, on disk, with the mode it was born with.

``write_atomic`` is the one way the services write state (keys, ledgers, stores, registries):

1. the data goes to a fresh temporary file in the same folder, created with ``mode`` (``mkstemp`` creates it
   0600; a wider public mode is set on the empty file before any byte is written), so a secret is never
   readable by others, not even for an instant;
2. the file is flushed and ``fsync``'d;
3. ``os.replace`` puts it in place atomically (a reader sees the old file or the new one, never half of one);
4. the folder is ``fsync``'d, so the rename itself survives a power cut.

Modes: ``PRIVATE`` (0600) for keys, secrets, ledgers and job state; ``PUBLIC`` (0644) only for material meant to
be handed out (certificates, configs without secrets, published releases).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

PRIVATE = 0o600
PUBLIC = 0o644


def write_atomic(path: str | os.PathLike[str], data: bytes | str, mode: int = PRIVATE) -> None:
    """Replace ``path`` with ``data`` (str is written as UTF-8) durably and atomically, created with ``mode``."""
    if mode & ~0o777:
        raise ValueError(f"mode {mode:o} has bits beyond the permission bits")
    target = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")  # O_EXCL, mode 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            if mode != PRIVATE:
                os.fchmod(fh.fileno(), mode)
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(target.parent)


def make_private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and its parents) if missing; the folder itself is 0700 from its creation."""
    folder = Path(path)
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    return folder


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Persist a folder's entries (a rename or a new file in it)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
