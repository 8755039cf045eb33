#!/usr/bin/env python3
"""Each GEMM of the eager MLP block alone (GPU machine): up (silu) and down projections
as cs.linear runs them (x.T and D column-major) and as matmul runs them with a row-major
D (and, for down, a row-major x), against dense torch; the kernel each one picks."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402


def device_us(call, repeats=20, rounds=7):
    call()
    torch.cuda.synchronize()
    best = []
    for _ in range(rounds):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(2e6))
        start.record()
        for _ in range(repeats):
            call()
        stop.record()
        stop.synchronize()
        best.append(start.elapsed_time(stop) * 1e3 / repeats)
    return sorted(best)[len(best) // 2]


def config_of(sw, x, **options):
    info = {}
    cs.matmul(sw, x, info=info, **options)
    return info["config"].replace("cutlass3x_sm90_sptensorop_spgemm_", "")


def main():
    for width, hidden in ((4096, 11008), (4096, 14336)):
        w_up = cs.prune_2to4(torch.randn(hidden, width, device="cuda").half() * width ** -0.5)
        w_down = cs.prune_2to4(torch.randn(width, hidden, device="cuda").half() * hidden ** -0.5)
        s_up, s_down = cs.compress(w_up), cs.compress(w_down)
        for tokens in (128, 512, 4096):
            x = torch.randn(tokens, width, device="cuda").half()
            h = torch.randn(tokens, hidden, device="cuda").half()
            h_rows = h.T.contiguous()        # [hidden, tokens] row-major
            out_col_up = torch.empty(tokens, hidden, device="cuda").half().T
            out_col_down = torch.empty(tokens, width, device="cuda").half().T
            rows = [
                ("up   linear (x col, D col)", lambda: cs.linear(x, s_up, activation="silu"),
                 config_of(s_up, x.T, activation="silu", out=out_col_up)),
                ("up   matmul (x col, D row)", lambda: cs.matmul(s_up, x.T, activation="silu"),
                 config_of(s_up, x.T, activation="silu")),
                ("up   dense", lambda: torch.mm(x, w_up.T), ""),
                ("down linear (x col, D col)", lambda: cs.linear(h, s_down),
                 config_of(s_down, h.T, out=out_col_down)),
                ("down matmul (x row, D row)", lambda: cs.matmul(s_down, h_rows), config_of(s_down, h_rows)),
                ("down matmul (x col, D row)", lambda: cs.matmul(s_down, h.T), config_of(s_down, h.T)),
                ("down dense", lambda: torch.mm(h, w_down.T), ""),
            ]
            print(f"\n{width}/{hidden}, {tokens} tokens")
            for name, call, config in rows:
                print(f"  {name:28s} {device_us(call):8.1f} us  {config}")


if __name__ == "__main__":
    main()
