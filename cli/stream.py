"""The one writer for stdout and stderr: every byte csa-plan prints goes through it.

``guarded()`` (entered once, by ``cli.main``) puts a ``GuardedStream`` in place of
``sys.stdout`` and ``sys.stderr`` for the run, so click, rich and the renderers all write
through it without knowing. It turns what the operating system can do to an output
stream into the documented endings instead of an internal error:

* the reader went away (``EPIPE``: ``csa-plan check X | head -1``): nothing more is
  written, nothing is said, the exit code is 141 (``EXIT_PIPE_CLOSED``, what a tool killed
  by SIGPIPE reports, so ``set -o pipefail`` still sees that output was cut);
* the stream cannot take the bytes (``ENOSPC`` on ``/dev/full``, ``EIO``, ``EFBIG``): one
  line on stderr naming the stream and the reason, exit 2;
* a character the stream's encoding cannot carry (``PYTHONIOENCODING=ascii``, ``latin-1``):
  written as a ``\\u2588``-style escape, never raised;
* an encoding that cannot carry text at all (``idna``, ``punycode``): one ASCII line on descriptor 2
  before anything is written, exit 2 (``refuse_unusable_streams``); UTF-16 and UTF-32 carry every
  character and are written (one BOM, from the stream's one encoder).

After a failure the stream's descriptor is pointed at ``/dev/null``, so the interpreter's
own last flush at exit has nothing left to fail on.

Colour (``color_system``): styles and escape sequences only on a terminal, whatever
``FORCE_COLOR`` or ``TTY_COMPATIBLE`` say, unless the user asks: ``csa-plan --color
always`` or ``CSA_PLAN_COLOR=always`` (``never`` turns colour off on a terminal too;
``NO_COLOR`` is honoured under ``auto``).

Standard library only: importing this costs nothing at start-up.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterator

EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE
COLOR_MODES = ("auto", "always", "never")
COLOR_ENV = "CSA_PLAN_COLOR"


class OutputClosed(BaseException):
    """The reader of stdout or stderr went away (EPIPE). A BaseException: no ``except Exception``
    in a command may turn it into an internal error."""


class OutputFailed(BaseException):
    """stdout or stderr cannot take what is written (ENOSPC, EIO, ...)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"cannot write to {name}: {reason}")
        self.name, self.reason = name, reason


class GuardedStream:
    """A text stream in front of another: writes that cannot be encoded are escaped, OS errors
    become ``OutputClosed`` / ``OutputFailed``, and after either everything is dropped."""

    def __init__(self, raw: Any, name: str) -> None:
        self._raw = raw
        self.name = name
        self.broken = False
        self._wide = None  # UTF-16/32: this stream's one incremental encoder (one BOM, at the first write)
        enc = getattr(raw, "encoding", None)
        if enc and wide_unicode(str(enc)) and hasattr(raw, "buffer"):
            import codecs

            self._wide = codecs.getincrementalencoder(str(enc))("backslashreplace")

    # what click and rich ask of a stream
    @property
    def encoding(self) -> str:
        return getattr(self._raw, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str:
        return "backslashreplace"

    def isatty(self) -> bool:
        try:
            return bool(self._raw.isatty())
        except (AttributeError, ValueError, OSError):
            return False

    def fileno(self) -> int:
        if self._raw is None:
            raise OSError("stream is closed")
        return self._raw.fileno()

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return False

    def write(self, text: str) -> int:
        if self.broken:
            return len(text)
        if self._raw is None:  # the descriptor was closed before Python started (``>&-``)
            self.broken = True
            raise OutputFailed(self.name, "it is closed")
        try:
            if self._wide is not None:  # encoded here, so the stream starts with exactly one BOM
                self._raw.flush()
                self._raw.buffer.write(self._wide.encode(text))
                return len(text)
            try:
                self._raw.write(text)
            except UnicodeError:  # nothing was written: the whole string is encoded first
                self._raw.write(self._escaped(text))
        except OSError as exc:
            self._fail(exc)
        return len(text)

    def _escaped(self, text: str) -> str:
        """``text`` with what the stream's encoding cannot carry as ``\\u2603``-style escapes."""
        try:
            return text.encode(self.encoding, "backslashreplace").decode(self.encoding, "replace")
        except (UnicodeError, LookupError):  # an encoding that cannot carry even escapes
            return text.encode("ascii", "backslashreplace").decode("ascii")

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.broken or self._raw is None:
            return
        try:
            self._raw.flush()
            if self._wide is not None:
                self._raw.buffer.flush()
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        self.broken = True
        _silence(self._raw)
        if isinstance(exc, BrokenPipeError):
            raise OutputClosed(self.name) from None
        raise OutputFailed(self.name, exc.strerror or type(exc).__name__) from None


def _silence(raw: Any) -> None:
    """Point the stream's descriptor at /dev/null (its buffered bytes then go nowhere, and the
    interpreter's flush at exit succeeds). Streams without a descriptor (tests) are left alone."""
    try:
        fd = raw.fileno()
    except (AttributeError, ValueError, OSError):
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(null, fd)
    except OSError:
        pass
    finally:
        os.close(null)


class Streams:
    """The guarded pair for one run."""

    def __init__(self, out: GuardedStream, err: GuardedStream) -> None:
        self.out, self.err = out, err

    def say_error(self, line: str) -> None:
        """One line on stderr, if stderr can still take it."""
        with contextlib.suppress(OutputClosed, OutputFailed):
            self.err.write(line + "\n")
            self.err.flush()


_PROBE = "csa-plan: " + "-" * 100 + " \u2588 \u2260.\n"  # a long line (idna's 63-byte labels), a block, newline


WIDE_UNICODE = ("utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be")


def wide_unicode(name: str) -> bool:
    """Whether ``name`` is UTF-16 or UTF-32 (any spelling Python accepts): not ASCII-compatible, but it
    carries every character, so the report is written in it (issue 47: it was refused as unable to)."""
    import codecs

    try:
        return codecs.lookup(name).name in WIDE_UNICODE
    except (LookupError, TypeError, ValueError):
        return False


def unusable_encoding(stream: Any) -> str | None:
    """The stream's encoding when it cannot carry csa-plan's text, else None: its ASCII must come out
    as ASCII and what it cannot encode as an escape (``PYTHONIOENCODING=idna``, ``punycode``,
    ``utf-16``: nothing, mangled or not ASCII-compatible)."""
    name = getattr(stream, "encoding", None)
    if stream is None or not name:
        return None
    if wide_unicode(str(name)):
        return None  # UTF-16/32 carry every character: the stream's one encoder writes one BOM, then text
    ascii_form = _PROBE.encode("ascii", "backslashreplace")
    try:
        got = _PROBE.encode(name, "backslashreplace")
    except (UnicodeError, LookupError, TypeError, ValueError):
        return str(name)
    if got == ascii_form or got == _PROBE.encode("utf-8"):
        return None
    head = _PROBE[:-6].encode("ascii")  # the ASCII part must come out unchanged, the newline last
    return None if got.startswith(head) and got.endswith(b".\n") else str(name)


def refuse_unusable_streams() -> None:
    """One ASCII line on descriptor 2 and exit 2 when stdout or stderr cannot carry text (written
    below Python's streams: an idna stderr cannot even say why)."""
    for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
        enc = unusable_encoding(stream)
        if enc is None:
            continue
        from csa_plan.planner.text import excerpt

        line = (f"csa-plan: error: {name}: its encoding {excerpt(enc)} cannot carry the output "
                "(set PYTHONIOENCODING=utf-8, or a locale with UTF-8)\n")
        with contextlib.suppress(OSError):
            os.write(2, line.encode("ascii", "backslashreplace"))
        raise SystemExit(_bad_input())


def refuse_bad_color_env() -> None:
    """CSA_PLAN_COLOR set to no mode: the line click gives a command, also where click never reads the
    variable (``--help``, ``--version`` and a bare ``csa-plan`` exit first), exit 2."""
    value = os.environ.get(COLOR_ENV)
    if not value or value in COLOR_MODES:  # empty is unset, as click reads it
        return
    from csa_plan.planner.text import printable

    modes = ", ".join(f"'{m}'" for m in COLOR_MODES)
    echo(f"csa-plan: error: Invalid value for '--color' (env var: '{COLOR_ENV}'): '{printable(value[:80])}' is not "
         f"one of {modes}.", err=True)
    raise SystemExit(_bad_input())


@contextlib.contextmanager
def guarded() -> Iterator[Streams]:
    """Run with ``sys.stdout`` / ``sys.stderr`` guarded; turn an output failure into its exit.

    Raises ``SystemExit``: 141 when a reader went away, 2 (one line on stderr) when a stream
    could not take the output; otherwise the run's own exit, after a final flush that is
    guarded the same way.
    """
    refuse_unusable_streams()
    saved = sys.stdout, sys.stderr
    streams = Streams(GuardedStream(saved[0], "stdout"), GuardedStream(saved[1], "stderr"))
    sys.stdout, sys.stderr = streams.out, streams.err  # type: ignore[assignment]
    code: Any = None
    try:
        try:
            yield streams
        finally:
            streams.out.flush()
            streams.err.flush()
    except OutputClosed:
        code = EXIT_PIPE_CLOSED
    except OutputFailed as exc:
        streams.say_error(f"csa-plan: error: {exc}")
        code = _bad_input()
    finally:
        sys.stdout, sys.stderr = saved
    if code is not None:
        raise SystemExit(code)


def _bad_input() -> int:
    from csa_plan.planner.errors import ExitCode

    return int(ExitCode.BAD_INPUT)


def echo(text: str, err: bool = False) -> None:
    """One line to stdout (or stderr), flushed: what ``click.echo`` does for csa-plan's own text,
    which ``planner/text.printable`` has already made safe for a terminal."""
    stream = sys.stderr if err else sys.stdout
    stream.write(f"{text}\n")
    stream.flush()


# -- colour ---------------------------------------------------------------------------------------

_color_mode: list[str] = []  # set by ``csa-plan --color``; else CSA_PLAN_COLOR; else auto


def set_color_mode(mode: str | None) -> None:
    _color_mode[:] = [mode] if mode else []


def color_mode() -> str:
    mode = _color_mode[0] if _color_mode else os.environ.get(COLOR_ENV, "auto").strip().lower() or "auto"
    return mode if mode in COLOR_MODES else "auto"


def console_settings(stream: Any) -> dict[str, Any]:
    """``rich.Console`` arguments for a stream: whether it is a terminal comes from the stream
    itself (never from FORCE_COLOR), colour from ``color_mode``."""
    terminal = bool(getattr(stream, "isatty", lambda: False)())
    mode = color_mode()
    if mode == "never":
        system = None
    elif mode == "always":
        system = "auto" if terminal else "standard"
    else:
        system = "auto" if terminal and not os.environ.get("NO_COLOR") else None
    no_color = {"never": True, "always": False}.get(mode)  # asked for: NO_COLOR does not override the option
    return {"force_terminal": terminal, "color_system": system, "no_color": no_color}
