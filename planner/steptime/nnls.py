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
