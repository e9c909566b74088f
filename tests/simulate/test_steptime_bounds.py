"""The step-time fit's physical ceilings (issue 44 item 6): the bounded solver is exact, every ceiling is derived
from its published figure, and the shipped coefficients stay inside the ceilings the fit applies."""

from __future__ import annotations

import itertools
import runpy

import numpy as np
import pytest

from helpers import ROOT

TOOL = runpy.run_path(str(ROOT / "tools" / "fit_steptime.py"), run_name="not_main")


def _brute(a, b, hi):
    """min |a x - b| over 0 <= x <= hi by trying every variable at 0, free or at its bound."""
    n, best = a.shape[1], np.inf
    for state in itertools.product(range(3), repeat=n):
        if any(s == 2 and not np.isfinite(hi[j]) for j, s in enumerate(state)):
            continue
        x = np.array([hi[j] if s == 2 else 0.0 for j, s in enumerate(state)])
        free = [j for j, s in enumerate(state) if s == 1]
        if free:
            x[free] = np.linalg.lstsq(a[:, free], b - a @ x, rcond=None)[0]
        if (x >= -1e-9).all() and (x <= hi + 1e-9).all():
            best = min(best, float(np.linalg.norm(a @ x - b)))
    return best


def test_bounded_nnls_is_the_constrained_optimum():
    from csa_plan.planner.steptime.nnls import bounded_nnls, nnls

    rng = np.random.default_rng(7)
    for _ in range(150):
        m, n = int(rng.integers(6, 25)), int(rng.integers(2, 6))
        a, b = rng.normal(size=(m, n)), 3 * rng.normal(size=m)
        hi = rng.uniform(0.1, 3.0, size=n)
        hi[rng.random(n) < 0.3] = np.inf
        x = bounded_nnls(a, b, hi)
        assert (x >= 0).all() and (x <= hi).all()
        assert np.linalg.norm(a @ x - b) <= _brute(a, b, hi) + 1e-9
    # no finite bound: the plain non-negative solution
    a, b = rng.normal(size=(12, 4)), rng.normal(size=12)
    assert np.allclose(bounded_nnls(a, b, np.full(4, np.inf)), nnls(a, b))


def test_each_ceiling_is_its_published_figure():
    """The state read's ceiling is FlashMLA's published sparse-decode rate on V4-Pro's widest record against the
    family's fastest HBM; the link ceiling DeepEP's published low-latency transfer against the card's link."""
    from csa_plan.planner.steptime.hardware import PERF

    record = 4 * 128 * 512  # FLOPs a V4-Pro query spends on one 604-byte record
    for family, rate in (("hopper", 410e12), ("blackwell", 350e12)):
        cards = [p for p in PERF.values() if p.family == family]
        c = TOOL["ceilings"](family)
        assert c["state"][0] == pytest.approx(record / rate / (604 / max(p.hbm_bytes_s for p in cards)))
        assert c["flops"][0] == pytest.approx(max(p.bf16_flops for p in cards) / rate)
        assert c["prefill_flops"][0] == pytest.approx(c["flops"][0] - 1)
        assert c["moe:deepep"][0] == pytest.approx(c["weights"][0] - 1)
        link = 128 * 8 * 7168 * 3 * 7 / 8 / (77e-6 + 114e-6)
        assert c["a2a_decode"][0] == pytest.approx(max(p.link_bytes_s for p in cards) / link)
        assert all(why for _, why in c.values())
    # the floors are seconds: no ceiling
    assert np.isinf(TOOL["upper"](("step", "layer", "request"), "blackwell", True)).all()


def test_the_shipped_fit_keeps_inside_the_ceilings_it_applies():
    """No HBM or FLOP coefficient above its ceiling (SGLang Blackwell's state read was 250x the HBM roofline); the
    link ceilings are reported, not applied, and the file says which."""
    from csa_plan.planner.steptime.physics import shipped_fit

    for name, fit in shipped_fit()["fits"].items():
        assert fit["ceilings"], name
        for term, c in fit["ceilings"].items():
            assert c["why"] and c["max"] > 0, (name, term)
            assert c["applied"] == (term not in TOOL["LINK_TERMS"]), (name, term)
            if c["applied"]:
                assert fit["beta"][term] <= c["max"] + 1e-3, (name, term, fit["beta"][term], c["max"])
    assert shipped_fit()["fits"]["sglang/blackwell"]["beta"]["state"] < 10


def test_itl_is_the_token_weighted_median_step():
    """ITL p50: each decoding request of a step waits that step for its next token."""
    steps = np.array([[1.0, 0.0], [2.0, 0.0], [10.0, 0.0]])
    beta = np.array([1.0, 0.0])
    assert TOOL["itl_p50"]((steps, np.array([1.0, 1.0, 5.0])), beta) @ beta == 10.0  # 5 of 7 tokens wait 10
    assert TOOL["itl_p50"]((steps, np.array([4.0, 1.0, 1.0])), beta) @ beta == 1.0
    assert TOOL["itl_p50"](None, beta) is None


def test_a_term_no_fitted_row_exercises_takes_the_other_familys_value():
    """A zero column over a family's fitted rows leaves its term unidentified: the other family's value stands in,
    and only for such terms (a term both families exercise keeps each family's own fit)."""
    basis = ("layer", "a2a_decode", "moe:marlin")
    rows = lambda *vectors: [{"tpot": np.array([v]), "ttft": None} for v in vectors]  # noqa: E731
    hopper = TOOL["exercised"](rows([1.0, 0.0, 2.0], [3.0, 0.0, 0.0]))      # TP rows: no all-to-all
    blackwell = TOOL["exercised"](rows([1.0, 5.0, 0.0]))                     # DP attention + EP, no Marlin
    assert hopper.tolist() == [True, False, True] and blackwell.tolist() == [True, True, False]
    betas = {"hopper": np.array([0.1, 1.0, 0.0]), "blackwell": np.array([0.2, 180.0, 0.0])}
    taken = TOOL["borrow_unexercised"](betas, {"hopper": hopper, "blackwell": blackwell}, basis)
    assert taken == {"hopper": {"a2a_decode": "blackwell"}, "blackwell": {"moe:marlin": "hopper"}}
    assert betas["hopper"].tolist() == [0.1, 180.0, 0.0] and betas["blackwell"].tolist() == [0.2, 180.0, 0.0]


def test_the_shipped_fit_says_which_terms_it_took_from_the_other_family():
    from csa_plan.planner.steptime.physics import shipped_fit

    fit = shipped_fit()["fits"]
    for fam, other in (("sglang/hopper", "sglang/blackwell"), ("sglang/blackwell", "sglang/hopper")):
        for term, donor in fit[fam]["borrowed"].items():
            assert f"sglang/{donor}" == other and fit[fam]["beta"][term] == fit[other]["beta"][term]
    assert "a2a_decode" in fit["sglang/hopper"]["borrowed"]
