"""Issue 47 leftover: ``PYTHONIOENCODING=utf-16`` or ``utf-32`` was refused with "cannot carry the output",
which is false: UTF-16 and UTF-32 carry every character. The report is written in them, with one BOM at
the start of each stream (none for the explicit-endian spellings, which have none), on every path:
the plain fast path, click, ``--help``, ``--version``, an error line, ``--json``."""

from __future__ import annotations

import codecs
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CSA = str(Path(sys.executable).with_name("csa-plan"))
BOMS = {"utf-16": (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE), "utf-32": (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)}
ARGVS = (("--help",), ("--version",), ("check", "deepseek-v4-flash", "--brief"), ("check", "deepseek-v4-flash", "--json"),
         ("check", "no-such-model"), ("compare", "deepseek-v4-flash", "--brief"))


def _run(encoding: str, argv: tuple[str, ...]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONIOENCODING": encoding}
    env.pop("CSA_PLAN_COLOR", None)
    return subprocess.run([CSA, *argv], capture_output=True, env=env, timeout=120)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-16-le", "UTF-32BE"])
@pytest.mark.parametrize("argv", ARGVS, ids=[" ".join(a) for a in ARGVS])
def test_the_report_is_written_in_utf16_and_utf32_with_one_bom(encoding, argv):
    done = _run(encoding, argv)
    assert done.returncode in (0, 2, 3), done.returncode
    name = codecs.lookup(encoding).name
    written = [b for b in (done.stdout, done.stderr) if b]
    assert written
    for data in written:
        boms = BOMS.get(name)
        if boms is not None:
            assert data.startswith(boms), data[:8]
        text = data.decode(name)  # the generic codecs take the BOM off
        assert "\ufeff" not in text and "cannot carry" not in text
        assert text.endswith("\n")
    if argv[-1] == "--json":
        assert json.loads(done.stdout.decode(name))["schema"].startswith("csa-plan/check/")
    if argv == ("check", "no-such-model"):
        assert done.returncode == 2 and "no-such-model" in done.stderr.decode(name)
