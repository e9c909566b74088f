"""Extreme time options are refused as bad input instead of wrapping the int64 clock."""

from __future__ import annotations

import pytest

from helpers import EXAMPLES

TRACE = str(EXAMPLES / "traces" / "azure_conv_sample_200.csv")


@pytest.mark.parametrize("option,value", [("--rate-scale", "1e-300"), ("--tpot-ms", "1e300"),
                                          ("--prefill-tok-s", "1e-300"), ("--rate-scale", "nan"),
                                          ("--tpot-ms", "inf")])
def test_extreme_time_options(csa, option, value):
    r = csa("simulate", TRACE, "--model", "deepseek-v4-flash", option, value)
    assert r.code == 2
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "Traceback" not in r.err
