"""Host (CPython): a ridge classifier whose penalty is chosen by closed-form leave-one-out.

    targets Y [N, K]: +1 for a window's class, -1 for the others (one column per class)
    W, b = argmin ||Z W^T + b - Y||^2 + alpha ||W||^2      (the intercept not penalized)
    alpha: of `ALPHAS`, the one with the least leave-one-out squared error, in closed form:
        Zc = Z - mean(Z) = U diag(s) V^T (thin SVD),  H = 1/N + U diag(s^2 / (s^2 + alpha)) U^T
        residual_i = (Y_i - Yhat_i) / (1 - H_ii)        (Yhat from the fit on all N windows)
    logits = Z W^T + b; the class is the first argmax.

This is scikit-learn's `RidgeClassifierCV(alphas)` with its default (efficient leave-one-out)
scoring, the classifier MiniRocket's paper trains on its features, in a few lines of NumPy: one
SVD serves every alpha, and the ties go to the smallest alpha (the first in `ALPHAS`).

References: R. Rifkin and R. Lippert (2007), "Notes on regularized least squares", MIT-CSAIL-
TR-2007-025 (leave-one-out in closed form); scikit-learn's `RidgeClassifierCV` (`_RidgeGCV`);
Dempster et al. (2021), MINIROCKET (`RidgeClassifierCV(alphas=np.logspace(-3, 3, 10))`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ALPHAS = tuple(float(a) for a in np.logspace(-3, 3, 10))


@dataclass(frozen=True)
class Ridge:
    """A fitted ridge classifier: `logits = Z @ W.T + b`."""

    W: np.ndarray  # (K, p)
    b: np.ndarray  # (K,)
    alpha: float
    loo_mse: tuple[float, ...]  # leave-one-out mean squared error per alpha of `alphas`

    def logits(self, Z: np.ndarray) -> np.ndarray:
        return Z @ self.W.T + self.b

    def importance(self) -> np.ndarray:
        """`(p,)` a feature's weight in the decisions: the sum of its |coefficients| over the
        classes (on standardized features, comparable across features)."""
        return np.abs(self.W).sum(axis=0)


def targets(y: np.ndarray, n_classes: int) -> np.ndarray:
    """`[N, K]` +1 at each window's class, -1 elsewhere."""
    Y = -np.ones((len(y), n_classes))
    Y[np.arange(len(y)), y] = 1.0
    return Y


def fit(Z: np.ndarray, y: np.ndarray, n_classes: int, alphas: tuple[float, ...] = ALPHAS) -> Ridge:
    """The ridge classifier of features `Z [N, p]` and labels `y [N]`, alpha chosen by
    closed-form leave-one-out squared error over `alphas`."""
    Z = np.asarray(Z, np.float64)
    N = len(Z)
    Y = targets(y, n_classes)
    z_mean, y_mean = Z.mean(axis=0), Y.mean(axis=0)
    U, s, Vt = np.linalg.svd(Z - z_mean, full_matrices=False)  # (N, r), (r,), (r, p)
    UtY = U.T @ (Y - y_mean)  # (r, K)
    mse = []
    for a in alphas:
        shrink = s**2 / (s**2 + a)  # (r,)
        fitted = U @ (shrink[:, None] * UtY) + y_mean  # (N, K)
        h = 1.0 / N + (U**2) @ shrink  # (N,) the hat matrix's diagonal
        loo = (Y - fitted) / (1.0 - h)[:, None]
        mse.append(float(np.mean(loo**2)))
    best = int(np.argmin(mse))
    a = alphas[best]
    W = (Vt.T @ ((s / (s**2 + a))[:, None] * UtY)).T  # (K, p)
    return Ridge(W, y_mean - W @ z_mean, float(a), tuple(mse))
