"""The strategy's state file: written atomically and durably, read back only when it can be trusted.

Contract
--------
- :func:`check_state_dir` runs when a strategy is built: it creates ``state_dir`` and writes and
  removes a probe file there, so an unwritable folder fails at construction (with the folder and the
  fix in the message), not after the first round has trained.
- :func:`write_atomic` writes the text to a temporary file in the same folder, ``fsync``s it,
  renames it over the target and ``fsync``s the folder: after it returns the new file survives a
  power cut; a crash at any point leaves either the old or the new file, never a mix. When a
  step fails the temporary file is removed and the error re-raised.
- :func:`write_or_log` is :func:`write_atomic` for the files written after every round: a write
  that fails (disk full, folder removed, read-only remount) logs one error line naming the file
  and the error and returns ``False``; the old file is intact and the caller writes again after
  its next round (a line says when a write succeeds again). A run never stops because its state
  could not be saved: it stops being resumable at the last round saved, and says so.
- :func:`read_state` returns the parsed JSON object, ``None`` when there is no file, or raises
  :class:`StateFileError` naming the file when it is empty, truncated, not JSON or not an object.
- :func:`set_aside` renames a file that cannot be used to ``<name>.bad-<UTC time>`` (kept for
  inspection) and returns the new path.

Cost
----
One extra ``fsync`` of the file and one of the folder per write (a few ms on a disk, more on a
network file system); reading is one ``json.loads``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from logging import ERROR, INFO
from pathlib import Path
from typing import Any

from flwr_adaptive._logging import logger

__all__ = ["StateFileError", "check_state_dir", "write_atomic", "write_or_log", "read_state", "set_aside"]

_FAILED: set[str] = set()  # files whose last write_or_log failed (a success then says so once)


class StateFileError(ValueError):
    """A state file that cannot be used; the message names the file and what to do."""


def check_state_dir(folder: str | os.PathLike) -> Path:
    """Create ``folder`` and prove a file can be written there; ``ValueError`` naming it if not."""
    path = Path(folder)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".adaptive-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ValueError(
            f"state_dir {str(path)!r} is not a writable folder ({err.strerror or err}); "
            "pass a folder this process may write to, or state_dir=None to keep no state "
            "file"
        ) from None
    return path


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open a folder: the rename is as durable as it gets there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a folder; the file itself was synced
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, data: str | bytes, *, sync_dir: bool = True) -> None:
    """Replace ``path`` by ``data`` (text as UTF-8, or bytes) atomically and durably (see the
    module contract). ``sync_dir=False`` leaves the folder's fsync to a later write of the same
    folder, for a file that is only valid together with the one written after it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if sync_dir:
        _fsync_dir(path.parent)


def write_or_log(path: str | os.PathLike, data: str | bytes, what: str, *, sync_dir: bool = True) -> bool:
    """:func:`write_atomic`, with an ``OSError`` logged (one error line) instead of raised.

    Parameters
    ----------
    what : str
        What the file holds and when it is written again, for the log line (e.g. "the controller
        state after round 3").

    Returns
    -------
    bool
        Whether the file now holds ``data``. On ``False`` the previous file is unchanged and no
        temporary file is left (:func:`write_atomic`'s guarantee).
    """
    key = str(path)
    try:
        write_atomic(path, data, sync_dir=sync_dir)
    except OSError as err:
        _FAILED.add(key)
        logger.log(
            ERROR,
            "[adaptive] could not write %s to %s (%s): the previous file is kept and the write is tried "
            "again after the next round; free space on that disk or fix the folder, else a restart resumes "
            "from the last state written",
            what,
            key,
            err.strerror or err,
        )
        return False
    if key in _FAILED:
        _FAILED.discard(key)
        logger.log(INFO, "[adaptive] wrote %s to %s again", what, key)
    return True


def read_state(path: str | os.PathLike, what_to_do: str) -> dict[str, Any] | None:
    """The JSON object in ``path``; ``None`` when there is no such file.

    Raises
    ------
    StateFileError
        The file is empty, unreadable, not JSON (e.g. truncated) or not a JSON object; the message
        names the file and ends with ``what_to_do``.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise StateFileError(f"state file {str(path)!r} cannot be read ({err.strerror or err}); {what_to_do}") from None
    if not raw.strip():
        raise StateFileError(f"state file {str(path)!r} is empty; {what_to_do}")
    try:
        state = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise StateFileError(
            f"state file {str(path)!r} is not valid JSON (truncated or overwritten: {err}); {what_to_do}"
        ) from None
    if not isinstance(state, dict):
        raise StateFileError(
            f"state file {str(path)!r} holds a JSON {type(state).__name__}, not the "
            f"strategy's state object; {what_to_do}"
        )
    return state


def set_aside(path: str | os.PathLike) -> Path:
    """Rename ``path`` to ``<name>.bad-<UTC time>`` next to it and return the new path."""
    path = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.bad-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.bad-{stamp}-{n}")
    os.replace(path, target)
    return target
