# %% [markdown]
# # Prototyping factors with factorjit
#
# A notebook-style example (cells marked `# %%`: it runs as a script, and Jupyter/VS Code open it as a
# notebook): load a price panel into pandas, prototype three factors as formulas, evaluate them in one
# compiled program, and plot one factor's cross-sectional rank IC (Spearman correlation of the factor with
# the next day's returns, across stocks, each day) over time.
#
#     PYTHONPATH=build/python python3 examples/factor_research.py [--data DIR] [--out ic.png]
#
# `--data DIR` reads `DIR/close.npy` and `DIR/volume.npy` (rows = days, columns = stocks; e.g. from
# `python3 bench/alpha_data.py`); without it a synthetic market is generated, with a weak short-term
# reversal built in so that the reversal factor has something to find.

# %%
import argparse
import os
import time

import matplotlib

matplotlib.use("Agg")  # no display needed: the figure is saved as a PNG
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import factorjit as fj

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--data", help="folder with close.npy and volume.npy")
parser.add_argument("--days", type=int, default=1500)
parser.add_argument("--stocks", type=int, default=500)
parser.add_argument("--out", default="factor_ic.png")
args, _ = parser.parse_known_args()

# %% [markdown]
# ## Load a price panel into pandas


# %%
def synthetic_market(days, stocks, seed=11):
    """Log-normal prices whose daily returns revert a little of the last five days' move, and volumes."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((days, stocks)) * 0.02
    returns = np.zeros((days, stocks))
    for t in range(days):
        past = returns[max(0, t - 5):t].sum(0)
        returns[t] = noise[t] - 0.04 * past
    close = 50 * np.exp(np.cumsum(returns, axis=0))
    volume = np.exp(rng.normal(13, 0.5, (days, stocks)) + 8 * np.abs(returns))
    return close, volume


if args.data:
    close_np = np.load(os.path.join(args.data, "close.npy"))
    volume_np = np.load(os.path.join(args.data, "volume.npy"))
else:
    close_np, volume_np = synthetic_market(args.days, args.stocks)
days = pd.bdate_range("2018-01-01", periods=close_np.shape[0], name="date")
tickers = pd.Index([f"S{j:04d}" for j in range(close_np.shape[1])], name="ticker")
close = pd.DataFrame(close_np, index=days, columns=tickers)
volume = pd.DataFrame(volume_np, index=days, columns=tickers)
print(f"panel: {close.shape[0]} days x {close.shape[1]} stocks")

# %% [markdown]
# ## Three factors as formulas, compiled together
#
# Shared subexpressions are computed once; `explain()` shows the steps and kernels.

# %%
factors = {
    "reversal_5d": "-1 * (close / delay(close, 5) - 1)",
    "pv_corr_10d": "-1 * correlation(rank(close), rank(volume), 10)",
    "vol_adj_mom_20d": "(close / delay(close, 20) - 1) / stddev(close / delay(close, 1) - 1, 20)",
}
program = fj.compile(factors)
print(program)
for what in ("first run, kernels compiled included", "second run"):
    t0 = time.perf_counter()
    values = program.run(close=close, volume=volume)  # DataFrames with close's index and columns
    print(f"evaluated {len(values)} factors in {1e3 * (time.perf_counter() - t0):.1f} ms on {program.backend} ({what})")

# %% [markdown]
# ## Cross-sectional rank IC against the next day's returns

# %%
forward = close.shift(-1) / close - 1


def rank_ic(factor, fwd):
    """Each day's Spearman correlation across stocks: Pearson correlation of the two rows' ranks."""
    f, r = factor.rank(axis=1), fwd.where(factor.notna()).rank(axis=1)
    f = f.where(r.notna())
    fc, rc = f.sub(f.mean(axis=1), axis=0), r.sub(r.mean(axis=1), axis=0)
    return (fc * rc).sum(axis=1) / np.sqrt((fc ** 2).sum(axis=1) * (rc ** 2).sum(axis=1))


ics = pd.DataFrame({name: rank_ic(v, forward) for name, v in values.items()}).dropna(how="all")
summary = pd.DataFrame({"mean IC": ics.mean(), "IC IR": ics.mean() / ics.std(), "days": ics.count()})
print(summary.round(4).to_string())

# %% [markdown]
# ## Plot one factor's IC over time

# %%
name = "reversal_5d"
fig, ax = plt.subplots(figsize=(10, 4))
ax.bar(ics.index, ics[name], width=1.0, color="0.75", label="daily rank IC")
ax.plot(ics.index, ics[name].rolling(60).mean(), color="C0", label="60-day mean")
ax.axhline(0, color="black", linewidth=0.5)
ax.set_title(f"{name}: cross-sectional rank IC vs next-day returns (mean {ics[name].mean():.3f})")
ax.set_ylabel("rank IC")
ax.legend(loc="upper left")
fig.tight_layout()
fig.savefig(args.out, dpi=100)
print(f"saved {args.out}")
