"""Reading input files as text: size-capped, regular files only, UTF-8, one-line errors."""

from __future__ import annotations

import stat
from pathlib import Path

from csa_plan.planner.errors import BadInput


MAX_SPEC_BYTES = 16 << 20


def path_kind(path: Path) -> str | None:
    """'file', 'dir', 'other' or None (absent). An unusable name (too long, not
    decodable, a loop) is bad input here, never an exception from the OS layer."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    except (OSError, ValueError) as exc:  # ENAMETOOLONG, ELOOP, EACCES, an embedded NUL ...
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BadInput(str(path), None, f"cannot access: {reason}") from None
    if stat.S_ISREG(info.st_mode):
        return "file"
    return "dir" if stat.S_ISDIR(info.st_mode) else "other"


def read_text(path: Path, max_bytes: int) -> str:
    """The whole file as UTF-8; a FIFO or device is refused before it is opened (it could block)."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(str(path), None, "not a regular file")
        if info.st_size > max_bytes:
            raise BadInput(str(path), None, f"file is larger than {max_bytes} bytes")
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(str(path), None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise BadInput(str(path), None, f"cannot read: {exc.strerror or exc}") from None
