"""Host time of an odd-N eager call (GPU machine): cs.matmul(sw, x) with a row-major torch
x [4096, N], N = 7 and 8, whole and piece by piece (calls queued behind a spin kernel,
median of five rounds), results checked.

    python scripts/device/probe_odd_n.py
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT.parent), str(ROOT / "device")]

from probe_pdl import host_us  # noqa: E402


def main():
    import torch

    import cutlass_sparse as cs
    from cutlass_sparse.api import eager, eager_keys, interop, matmul as api_matmul

    w = cs.prune_2to4(torch.randn(4096, 4096, device="cuda").half() * 0.02)
    sw = cs.compress(w)
    options = api_matmul._DEFAULT_OPTIONS
    for n in (7, 8):
        x = torch.randn(4096, n, device="cuda").half()
        ref = w.float() @ x.float()
        got = cs.matmul(sw, x)
        got = cs.matmul(sw, x)
        torch.cuda.synchronize()
        err = float((got.float() - ref).norm() / ref.norm())
        key = eager_keys.torch_key(sw, x, None, options)
        entry = eager.lookup(key)
        print(f"N={n}: rel err {err:.1e} ({'ok' if err < 2e-2 else 'WRONG'}), strides {tuple(got.stride())}, "
              f"fast path {'hit' if entry is not None else 'MISSED'}, direct {entry.plan.direct if entry else '-'}")
        stream = interop.torch_stream(0)
        y = entry.new_out(x)
        rows = {
            "cs.matmul(sw, x)": lambda: cs.matmul(sw, x),
            "torch_key": lambda: eager_keys.torch_key(sw, x, None, options),
            "lookup": lambda: eager.lookup(key),
            "new_out": lambda: entry.new_out(x),
            "torch_stream": lambda: interop.torch_stream(0),
            "launch (staged or direct)": (lambda: entry.plan.launch_staged(sw, x.data_ptr(), y.data_ptr(), stream))
            if not entry.plan.direct else (lambda: entry.plan.launch_direct(sw, x.data_ptr(), y.data_ptr(), stream)),
            "torch.mm(w, x)": lambda: torch.mm(w, x),
        }
        for name, fn in rows.items():
            print(f"  {name:28s} {host_us(fn):7.2f} us")


if __name__ == "__main__":
    main()
