#!/usr/bin/env python3
"""cs.linear's D layout (GPU machine): the eager MLP block with D written column-major
(today's cs.linear on sm90) against row-major (the matmul path, its result transposed),
per token count; each block checked against dense."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402


def device_ms(call, repeats=20, rounds=5):
    call()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            call()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / repeats)
    return sorted(times)[len(times) // 2]


def main():
    for width, hidden in ((4096, 11008), (4096, 14336)):
        w_up = cs.prune_2to4(torch.randn(hidden, width, device="cuda").half() * width ** -0.5)
        w_down = cs.prune_2to4(torch.randn(width, hidden, device="cuda").half() * hidden ** -0.5)
        s_up, s_down = cs.compress(w_up), cs.compress(w_down)
        print(f"\n{width}/{hidden}: block ms (col D | row D | dense)")
        for tokens in (1, 8, 16, 32, 64, 128, 512, 4096):
            x = torch.randn(tokens, width, device="cuda").half()

            def col(x=x):
                return cs.linear(cs.linear(x, s_up, activation="silu"), s_down)

            def row(x=x):
                return cs.matmul(s_down, cs.matmul(s_up, x.T, activation="silu")).T

            def dense(x=x):
                return torch.mm(torch.nn.functional.silu(torch.mm(x, w_up.T)), w_down.T)

            ref = dense().float()
            errs = [float((f().float() - ref).norm() / ref.norm()) for f in (col, row)]
            c, r, d = device_ms(col), device_ms(row), device_ms(dense)
            print(f"  {tokens:5d}  {c:7.3f} {r:7.3f} {d:7.3f}   col {d / c:5.2f}x  row {d / r:5.2f}x dense"
                  f"   err {max(errs):.1e}")


if __name__ == "__main__":
    main()
