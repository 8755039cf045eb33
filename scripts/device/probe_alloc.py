#!/usr/bin/env python3
"""Issue 11 (GPU machine): where a torch cs.matmul without out= spends the host time its
out= twin does not: allocating D. Each piece timed alone (host us per call, median of
rounds), beside torch.mm with and without out=."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse.api import eager  # noqa: E402
from probe_eager_parts import host_us  # noqa: E402   (median of rounds of a loop, host us per call)


def main():
    m, n, k = 128, 64, 128
    w = cs.prune_2to4(torch.randn(m, k, device="cuda").half())
    x = torch.randn(k, n, device="cuda").half()
    sw = cs.compress(w)
    y = cs.matmul(sw, x)
    cs.matmul(sw, x)
    template = eager.one_element(torch.float16, x.device.index).expand(m, n)
    real = torch.empty(m, n, device="cuda", dtype=torch.float16)
    dev = x.device
    rows = [
        ("cs.matmul(sw, x)", lambda: cs.matmul(sw, x)),
        ("cs.matmul(sw, x, out=y)", lambda: cs.matmul(sw, x, out=y)),
        ("torch.mm(w, x)", lambda: torch.mm(w, x)),
        ("torch.mm(w, x, out=y)", lambda: torch.mm(w, x, out=y)),
        ("empty_like(stride-0 template)", lambda: torch.empty_like(template)),
        ("empty_like(real [M, N])", lambda: torch.empty_like(real)),
        ("torch.empty(shape, dtype, device)", lambda: torch.empty((m, n), dtype=torch.float16, device=dev)),
        ("real.new_empty(shape)", lambda: real.new_empty((m, n))),
        ("x.device", lambda: x.device),
        ("x.data_ptr()", lambda: x.data_ptr()),
    ]
    for name, call in rows:
        print(f"  {name:36s} {host_us(call):6.2f} us", flush=True)


if __name__ == "__main__":
    main()
