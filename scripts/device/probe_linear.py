#!/usr/bin/env python3
"""cs.linear's D layout (GPU machine): the eager MLP block with D written column-major
(today's cs.linear on sm90) against row-major (the matmul path, its result transposed),
per token count; each block checked against dense."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402


def interleaved_ms(calls, repeats=20, rounds=9):
    """Median ms per call of each callable, their rounds interleaved (clock drift and
    machine noise fall on all of them alike)."""
    for call in calls:
        call()
    torch.cuda.synchronize()
    times = [[] for _ in calls]
    for _ in range(rounds):
        for i, call in enumerate(calls):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(repeats):
                call()
            stop.record()
            stop.synchronize()
            times[i].append(start.elapsed_time(stop) / repeats)
    return [sorted(t)[len(t) // 2] for t in times]


def main():
    torch.cuda._sleep(int(2e9))   # the clocks up before anything is timed
    torch.cuda.synchronize()
    for width, hidden in ((4096, 11008), (4096, 14336)):
        w_up = cs.prune_2to4(torch.randn(hidden, width, device="cuda").half() * width ** -0.5)
        w_down = cs.prune_2to4(torch.randn(width, hidden, device="cuda").half() * hidden ** -0.5)
        s_up, s_down = cs.compress(w_up), cs.compress(w_down)
        print(f"\n{width}/{hidden}: block ms (col D | row D | dense)")
        for tokens in (1, 7, 16, 64, 128, 512, 4096):
            x = torch.randn(tokens, width, device="cuda").half()

            def col(x=x):
                return cs.linear(cs.linear(x, s_up, activation="silu"), s_down)

            def row(x=x):
                return cs.matmul(s_down, cs.matmul(s_up, x.T, activation="silu")).T

            def dense(x=x):
                return torch.mm(torch.nn.functional.silu(torch.mm(x, w_up.T)), w_down.T)

            ref = dense().float()
            errs = [float((f().float() - ref).norm() / ref.norm()) for f in (col, row)]
            c, r, d = interleaved_ms((col, row, dense))
            print(f"  {tokens:5d}  {c:7.3f} {r:7.3f} {d:7.3f}   col {d / c:5.2f}x  row {d / r:5.2f}x dense"
                  f"   err {max(errs):.1e}")


if __name__ == "__main__":
    main()
