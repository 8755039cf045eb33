"""bench_eager's host rows three times over, in its order, then where a repeated torch
cs.matmul(sw, x) spends its host time (cProfile, own time) and what the eager path holds
for it: is a slow row the call itself or its place in the run?

    python scripts/device/probe_host_rows.py
"""
from __future__ import annotations

import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from bench_eager import HOST_SHAPE, host_us  # noqa: E402
from cutlass_sparse.api import eager, eager_keys, matmul as api_matmul  # noqa: E402


def main() -> None:
    m, n, k = HOST_SHAPE
    w = cs.prune_2to4(torch.randn(m, k, device="cuda").half())
    sw = cs.compress(w)
    x = torch.randn(k, n, device="cuda").half()
    out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    planned = cs.plan(sw, x)
    kept = cs.matmul(sw, x)   # as bench_eager's checks: the first result stays alive
    err = float((kept.float() - w.float() @ x.float()).norm() / (w.float() @ x.float()).norm())
    rows = {
        "cs.matmul(sw, x)": lambda: cs.matmul(sw, x),
        "cs.matmul(sw, x, out=y)": lambda: cs.matmul(sw, x, out=out),
        "plan(x, out=y)": lambda: planned(x, out=out),
        "torch.mm(w, x)": lambda: torch.mm(w, x),
        "torch.empty(m, n)": lambda: torch.empty(m, n, device="cuda", dtype=torch.float16),
    }
    print(f"rel err {err:.1e}")
    for round_ in range(3):
        print(f"round {round_}: " + ", ".join(f"{name} {host_us(torch, fn):.1f}" for name, fn in rows.items()),
              flush=True)
    key = eager_keys.torch_key(sw, x, None, api_matmul._DEFAULT_OPTIONS)
    entry = None if key is None else eager.lookup(key)
    plan = None if entry is None else entry.plan
    print("eager entry:", entry is not None, "direct:", getattr(plan, "direct", None),
          "readies:", None if plan is None else len(plan._readies),
          "host params:", None if plan is None else len(plan._host_params))
    pointers = set()
    for _ in range(5):
        pointers.add(cs.matmul(sw, x).data_ptr())
    print("distinct D pointers over 5 calls:", len(pointers))
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(300):
        cs.matmul(sw, x)
    profile.disable()
    torch.cuda.synchronize()
    pstats.Stats(profile).sort_stats("tottime").print_stats(18)
    cupy.cuda.Device().synchronize()


if __name__ == "__main__":
    main()
