"""A plain NumPy float64 reference for the operators of docs/operators.md, window by window.

Written for obviousness, sharing nothing with the library: every window is sliced out row by row and
reduced with NumPy's nan-functions, every row of a cross-sectional operator is reduced on its own. The
float32 reference is this reference applied to the float32 inputs (converted to float64): both sides read
the same numbers (tests/backend_cases.hpp says why that is the fair comparison).
"""

import warnings

import numpy as np


def _windows(x, d):
    """(t, the rows t-d+1..t of x as a d x cols block, NaN before row 0), for every row t."""
    pad = np.full((d - 1, x.shape[1]), np.nan)
    xp = np.vstack([pad, x])
    for t in range(x.shape[0]):
        yield t, xp[t:t + d]


def rolling(x, d, min_periods, reduce, need):
    """reduce(block, valid) of every window; NaN where fewer than max(min_periods, need) values are valid."""
    out = np.full(x.shape, np.nan)
    for t, w in _windows(x, d):
        valid = ~np.isnan(w)
        n = valid.sum(0)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows: their NaN is what is meant
            r = reduce(w, valid, n)
        out[t] = np.where(n >= max(min_periods, need), r, np.nan)
    return out


def ts_sum(x, d, mp=None):
    return rolling(x, d, d if mp is None else mp, lambda w, v, n: np.nansum(w, 0), 0)


def ts_mean(x, d, mp=None):
    return rolling(x, d, d if mp is None else mp, lambda w, v, n: np.nansum(w, 0) / n, 1)


def ts_count(x, d):
    return rolling(x, d, 0, lambda w, v, n: n.astype(float), 0)


def _var(w, v, n):  # two-pass; NaN with an infinity in the window
    bad = np.isinf(np.where(v, w, 0)).any(axis=0)
    m = np.nansum(w, 0) / n
    r = np.nansum((w - m) ** 2, 0) / (n - 1)
    return np.where(bad, np.nan, r)


def ts_var(x, d, mp=None):
    return rolling(x, d, d if mp is None else mp, _var, 2)


def ts_std(x, d, mp=None):
    return np.sqrt(ts_var(x, d, mp))


def ts_min(x, d, mp=None):
    return rolling(x, d, d if mp is None else mp, lambda w, v, n: np.nanmin(np.where(v, w, np.inf), 0), 1)


def ts_max(x, d, mp=None):
    return rolling(x, d, d if mp is None else mp, lambda w, v, n: np.nanmax(np.where(v, w, -np.inf), 0), 1)


def ts_argmin(x, d):  # 1-based from the oldest row; ties: the oldest
    return rolling(x, d, d, lambda w, v, n: np.argmin(np.where(v, w, np.inf), 0) + 1.0, 1)


def ts_argmax(x, d):
    return rolling(x, d, d, lambda w, v, n: np.argmax(np.where(v, w, -np.inf), 0) + 1.0, 1)


def ts_rank(x, d):
    def r(w, v, n):
        newest = w[-1]
        less = (v & (w < newest)).sum(0)
        equal = (v & (w == newest)).sum(0)
        return np.where(np.isnan(newest), np.nan, (less + (equal + 1) / 2.0) / n)
    return rolling(x, d, d, r, 1)


def ts_product(x, d):
    return rolling(x, d, d, lambda w, v, n: np.nanprod(w, 0), 0)


def decay_linear(x, d):
    weights = np.arange(1, d + 1, dtype=float)[:, None]
    return rolling(x, d, d, lambda w, v, n: np.nansum(w * weights, 0) / (weights * v).sum(0), 1)


def _pair(x, y, d, stat):
    out = np.full(x.shape, np.nan)
    px = np.vstack([np.full((d - 1, x.shape[1]), np.nan), x])
    py = np.vstack([np.full((d - 1, y.shape[1]), np.nan), y])
    for t in range(x.shape[0]):
        for j in range(x.shape[1]):
            a, b = px[t:t + d, j], py[t:t + d, j]
            ok = ~np.isnan(a) & ~np.isnan(b)
            a, b = a[ok], b[ok]
            if len(a) < max(d, 2) or np.isinf(a).any() or np.isinf(b).any():
                continue
            out[t, j] = stat(a, b)
    return out


def ts_cov(x, y, d):
    return _pair(x, y, d, lambda a, b: ((a - a.mean()) * (b - b.mean())).sum() / (len(a) - 1))


def ts_corr(x, y, d):
    def corr(a, b):
        if (a == a[0]).all() or (b == b[0]).all():
            return np.nan
        da, db = a - a.mean(), b - b.mean()
        return np.clip((da * db).sum() / np.sqrt((da * da).sum() * (db * db).sum()), -1, 1)
    return _pair(x, y, d, corr)


def delay(x, k):
    out = np.full(x.shape, np.nan)
    out[k:] = x[:len(x) - k]
    return out


def compare(a, b, lt):
    with np.errstate(invalid="ignore"):
        return lt(a, b).astype(float)


def logical(a, b, f):
    r = f(a != 0, b != 0).astype(float)
    return np.where(np.isnan(a) | np.isnan(b), np.nan, r)


def where(c, a, b):
    return np.where(np.isnan(c), np.nan, np.where(c != 0, a, b))


def _by_row(x, g, f):
    """f(values) over each row's (and group's) valid values; NaN elsewhere."""
    out = np.full(x.shape, np.nan)
    for t in range(x.shape[0]):
        row, ids = x[t], (np.zeros(x.shape[1]) if g is None else g[t])
        ok = ~np.isnan(row) & ~np.isnan(ids)
        for gid in np.unique(ids[ok]):
            cols = np.nonzero(ok & (ids == gid))[0]
            with np.errstate(all="ignore"):
                out[t, cols] = f(row[cols])
    return out


def _rank(v):
    less = (v[None, :] < v[:, None]).sum(1)
    equal = (v[None, :] == v[:, None]).sum(1)
    return (less + (equal + 1) / 2.0) / len(v)


def _zscore(v):
    if len(v) < 2 or (v == v[0]).all():
        return np.full(len(v), np.nan)
    return (v - v.mean()) / v.std(ddof=1)


def rank(x, g=None):
    return _by_row(x, g, _rank)


def zscore(x, g=None):
    return _by_row(x, g, _zscore)


def demean(x, g=None):
    return _by_row(x, g, lambda v: v - v.mean())


def scale(x):
    return _by_row(x, None, lambda v: v / np.abs(v).sum())


def ts_quantile(x, d, q):  # numpy's "linear" quantile of the valid values
    return rolling(x, d, d, lambda w, v, n: np.nanquantile(np.where(v, w, np.nan), q, axis=0), 1)


def ema(x, span):
    """e = a x + (1 - a) e from the first valid value; a missing value leaves e (and is its result)."""
    a = 2.0 / (span + 1.0)
    out = np.full(x.shape, np.nan)
    for j in range(x.shape[1]):
        e = np.nan
        for t in range(x.shape[0]):
            if not np.isnan(x[t, j]):
                e = x[t, j] if np.isnan(e) else a * x[t, j] + (1 - a) * e
            out[t, j] = e
    return out
