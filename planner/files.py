"""The input boundary for files: open once, check the descriptor, read a bounded number of bytes.

Every file csa-plan reads goes through ``open_regular``: the path is opened once
(``O_NONBLOCK``, so a FIFO or a device cannot block the open) and the *descriptor* is
``fstat``-ed — there is no check of the path followed by a second open that a swapped
file could race. Anything but a regular file (a FIFO, a device such as ``/dev/zero``
behind a symlink, a socket, a directory) is bad input naming what it is. Reads stop
at the caller's byte limit, named in the message, even if the file grows meanwhile.

Output paths (``--plot``) are checked before any work by ``check_output_path`` and
written with ``write_atomically`` (a temporary file in the same folder, then a rename),
so a reader never sees a half-written file and two writers leave one whole file.
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import TYPE_CHECKING, Callable, Iterator

from csa_plan.planner.errors import BadInput
from csa_plan.planner.text import excerpt

if TYPE_CHECKING:  # pathlib is imported where a path is built (a preset check never builds one)
    from pathlib import Path

_READ_CHUNK = 1 << 20
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


def describe_mode(mode: int) -> str:
    """What a non-regular file is, for a message."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _os_reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)[:200]


def path_kind(path: Path) -> str | None:
    """'file', 'dir', 'other' or None (absent), for dispatch only: the file itself is read
    through ``open_regular``, which checks again on the descriptor. An unusable name (too
    long, not decodable, a loop) is bad input here, never an exception from the OS layer."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError) as exc:  # ENAMETOOLONG, ELOOP, EACCES, an embedded NUL ...
        raise BadInput(str(path), None, f"cannot access: {_os_reason(exc)}") from None
    if stat.S_ISREG(info.st_mode):
        return "file"
    return "dir" if stat.S_ISDIR(info.st_mode) else "other"


@contextlib.contextmanager
def open_regular(path: Path | str, max_bytes: int, limit_name: str) -> Iterator[tuple[int, int]]:
    """``(fd, size)`` of a regular file of at most ``max_bytes`` bytes, opened once; closed on exit."""
    source = str(path)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise BadInput(source, None, "no such file") from None
    except (OSError, ValueError) as exc:
        raise BadInput(source, None, f"cannot open: {_os_reason(exc)}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(source, None, f"{describe_mode(info.st_mode)}, not a regular file")
        if info.st_size > max_bytes:
            raise BadInput(source, None, f"file is {info.st_size:,} bytes, more than the {max_bytes:,}-byte limit "
                                         f"({limit_name})")
        yield fd, info.st_size
    finally:
        os.close(fd)


def read_bytes(path: Path | str, max_bytes: int, limit_name: str = "MAX_FILE_BYTES") -> bytes:
    """The whole (regular) file, at most ``max_bytes`` bytes even if it grows while read."""
    with open_regular(path, max_bytes, limit_name) as (fd, size):
        chunks: list[bytes] = []
        total = 0
        try:
            while True:
                chunk = os.read(fd, min(_READ_CHUNK, max_bytes + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
                if total > max_bytes:
                    raise BadInput(str(path), None, f"file grew past the {max_bytes:,}-byte limit ({limit_name}) "
                                                    "while it was read")
        except OSError as exc:
            raise BadInput(str(path), None, f"cannot read: {_os_reason(exc)}") from None
        return b"".join(chunks)


def decode_utf8(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(source, None, f"not UTF-8 text ({exc.reason} at byte {exc.start:,})") from None


def read_text(path: Path | str, max_bytes: int, limit_name: str = "MAX_FILE_BYTES") -> str:
    """The whole file as UTF-8 text; a FIFO or device is refused on its descriptor (it never blocks)."""
    return decode_utf8(read_bytes(path, max_bytes, limit_name), str(path))


def hash_file(path: Path | str, max_bytes: int, limit_name: str) -> "hashlib._Hash":
    """SHA-256 of a regular file, streamed in bounded chunks (never the whole file in memory)."""
    import hashlib  # here, not at import: only a sweep hashes its workload (start-up)

    h = hashlib.sha256()
    with open_regular(path, max_bytes, limit_name) as (fd, _size):
        total = 0
        try:
            while chunk := os.read(fd, _READ_CHUNK):
                total += len(chunk)
                if total > max_bytes:
                    raise BadInput(str(path), None, f"file grew past the {max_bytes:,}-byte limit ({limit_name})")
                h.update(chunk)
        except OSError as exc:
            raise BadInput(str(path), None, f"cannot read: {_os_reason(exc)}") from None
    return h


# -- output paths --------------------------------------------------------------------------

PLOT_EXTENSIONS = (".png", ".svg", ".pdf")


def check_output_path(path: str, option: str, extensions: tuple[str, ...] = PLOT_EXTENSIONS) -> Path:
    """A path a file can be written to: a file name (not ending in ``/``) with a known extension,
    an existing writable folder, and either nothing there yet or a regular file (a directory or
    a device is refused)."""
    if not path:
        raise BadInput("options", option, "the path is empty")
    if "\0" in path:
        raise BadInput("options", option, f"the path {excerpt(path)} contains a NUL character")
    name = os.path.basename(path)
    if name in ("", ".", ".."):  # "x.png/" or "x.png/.": pathlib would drop the slash and call it x.png
        raise BadInput("options", option, f"{excerpt(path)} names a folder, not a file (use e.g. plot.png)")
    from pathlib import Path

    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in extensions:
        shown = f"extension {excerpt(p.suffix)}" if p.suffix else "no extension"
        raise BadInput("options", option, f"{excerpt(path)} has {shown} (use {', '.join(extensions)})")
    parent = p.parent if str(p.parent) else Path(".")
    kind = path_kind(parent)
    if kind != "dir":
        what = "does not exist" if kind is None else "is not a directory"
        raise BadInput("options", option, f"cannot write {excerpt(path)}: the folder {excerpt(str(parent))} {what}")
    try:
        info = os.stat(p)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise BadInput("options", option, f"cannot write {excerpt(path)}: {_os_reason(exc)}") from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise BadInput("options", option, f"cannot write {excerpt(path)}: it is {describe_mode(info.st_mode)}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BadInput("options", option, f"cannot write {excerpt(path)}: the folder is not writable")
    return p


def check_distinct_outputs(first: tuple[str, str | None], second: tuple[str, str | None]) -> None:
    """Two output options (``(option, path)``) must not name one file: ``--plot`` written at the end
    would replace a ``--resume`` file and every finished point in it. Compared after resolving
    links and ``..``, and by device and inode when both exist (a hard link is the same file)."""
    (option_a, a), (option_b, b) = first, second
    if not a or not b:
        return
    same = os.path.realpath(a) == os.path.realpath(b)
    if not same:
        with contextlib.suppress(OSError, ValueError):
            same = os.path.samefile(a, b)
    if same:
        raise BadInput("options", option_b, f"{excerpt(b)} is the {option_a} file {excerpt(a)}: name another file")


def write_atomically(path: Path | str, option: str, write: Callable[[str], None]) -> None:
    """``write(temporary_path)`` in the target's folder, then rename it onto ``path``."""
    from pathlib import Path

    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    fd, tmp = -1, ""
    try:
        import tempfile  # here, not at import: only writers need it (start-up)

        fd, tmp = tempfile.mkstemp(prefix=f".{target.stem[:40]}.", suffix=target.suffix, dir=folder)
        os.close(fd)
        fd = -1
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a plot is an ordinary file
        write(tmp)
        os.replace(tmp, target)
        tmp = ""
    except OSError as exc:
        raise BadInput("options", option, f"cannot write {excerpt(str(path))}: {_os_reason(exc)}") from None
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
