"""Pipeline split and device numbering."""

from __future__ import annotations

import sys
import subprocess

import pytest

from csa_plan.planner.errors import BadInput
from csa_plan.planner.placement import Placement, split_stages


@pytest.mark.parametrize("main,mtp,pp,counts", [(61, 1, 1, (61,)), (61, 1, 2, (31, 30)), (61, 1, 4, (16, 15, 15, 15)),
                                                 (43, 1, 2, (22, 21)), (8, 0, 8, (1,) * 8)])
def test_stages_are_contiguous_and_even_with_mtp_last(main, mtp, pp, counts):
    split = split_stages(main, mtp, pp)
    assert split.main_counts == counts
    flat = [i for ids in split.layers for i in ids]
    assert flat == list(range(main + mtp))
    assert split.layers[-1][-mtp:] == tuple(range(main, main + mtp)) if mtp else True


def test_split_is_described():
    assert split_stages(61, 1, 2).describe() == "31 / 30+1 MTP"


def test_more_stages_than_layers_is_bad_input():
    with pytest.raises(BadInput, match="--pp"):
        split_stages(4, 1, 5)


def test_device_numbering():
    p = Placement(tp=2, pp=3, dp=2)
    assert p.device_count == 12
    assert p.replica_devices(1) == tuple(range(6, 12))
    assert p.device(1, 2, 1) == 11 and p.stage_of(11) == 2 and p.stage_of(2) == 1


@pytest.mark.parametrize("field", ["tp", "pp", "dp"])
def test_zero_parallelism_is_bad_input(field):
    with pytest.raises(BadInput, match=f"--{field}"):
        Placement(**{field: 0})


def test_simulate_command_module_does_not_import_numpy():
    code = ("import sys, csa_plan.cli.simulate, csa_plan.planner.reserve, csa_plan.planner.ledger, "
            "csa_plan.planner.workloads\nassert 'numpy' not in sys.modules, 'numpy imported'")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
