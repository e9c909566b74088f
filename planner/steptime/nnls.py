"""Non-negative least squares (Lawson and Hanson's active set), for the step-time fits: the few
coefficients of ``physics.py`` and ``measured.py`` are times and must not go negative. Small
problems only (tens of rows, seven columns); numpy, so no SciPy for one function."""

from __future__ import annotations

from typing import Any


def nnls(a: Any, b: Any, iters: int = 200) -> Any:
    """x >= 0 minimising |a x - b|."""
    import numpy as np

    m, n = a.shape
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    for _ in range(iters):
        w = a.T @ (b - a @ x)
        if passive.all() or (w[~passive] <= 1e-12).all():
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > 1e-15
    return x


def bounded_nnls(a: Any, b: Any, hi: Any, iters: int = 50) -> Any:
    """0 <= x <= hi minimising |a x - b| (``hi`` may hold ``inf``): the step-time fits' coefficients have
    physical ceilings as well as floors (``tools/fit_steptime.py``'s ``ceilings``). An active set on the upper
    bounds around ``nnls``: a coefficient the free solve puts above its ceiling is held there and the rest
    solved again; one held whose gradient asks to come down is released. Exact for the small, well-posed
    problems of the fits (the loop ends when no bound is violated and no held bound wants release)."""
    import numpy as np

    n = a.shape[1]
    hi = np.asarray(hi, dtype=float)
    held = np.zeros(n, dtype=bool)
    x = np.zeros(n)
    for _ in range(iters):
        free = ~held
        rest = b - a[:, held] @ hi[held]
        x = np.where(held, hi, 0.0)
        if free.any():
            x[free] = nnls(a[:, free], rest)
        over = free & (x > hi)
        grad = a.T @ (b - a @ x)  # > 0: the objective falls as the coefficient rises
        release = held & (grad < -1e-12)
        if not over.any() and not release.any():
            break
        held = (held | over) & ~release
    return np.minimum(x, hi)
