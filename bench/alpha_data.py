# Writes a synthetic market of T x N float32 panels (the inputs and group ids of the 101 alphas) as .npy files:
#   python3 bench/alpha_data.py T N DIR      (numpy; used for the A1 runs of bench/RESULTS.md)
import numpy as np, sys, os
T, N, d = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(7)
ret = (0.02 * rng.standard_normal((T, N))).astype(np.float32)
close = (100 * np.exp(np.cumsum(ret, axis=0))).astype(np.float32)
opn = (close * (1 + 0.005 * rng.standard_normal((T, N)))).astype(np.float32)
high = np.maximum(opn, close) * (1 + 0.01 * np.abs(rng.standard_normal((T, N)))).astype(np.float32)
low = np.minimum(opn, close) * (1 - 0.01 * np.abs(rng.standard_normal((T, N)))).astype(np.float32)
vol = np.exp(13 + rng.standard_normal((T, N))).astype(np.float32)
vwap = ((high + low + close) / 3).astype(np.float32)
cap = (close * np.exp(18 + rng.standard_normal((1, N)))).astype(np.float32)
sector = np.broadcast_to(rng.integers(0, 11, (1, N)), (T, N)).astype(np.float32)
industry = np.broadcast_to(rng.integers(0, 60, (1, N)), (T, N)).astype(np.float32)
sub = np.broadcast_to(rng.integers(0, 200, (1, N)), (T, N)).astype(np.float32)
for k, v in dict(open=opn, high=high, low=low, close=close, volume=vol, vwap=vwap, returns=ret, cap=np.broadcast_to(cap, (T, N)),
                 sector=sector, industry=industry, subindustry=sub).items():
    np.save(os.path.join(d, k + ".npy"), np.ascontiguousarray(v, dtype=np.float32))
