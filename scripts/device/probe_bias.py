#!/usr/bin/env python3
"""What a bias costs an eager sm90 call (GPU machine): cs.linear(x, sw) against
cs.linear(x, sw, bias=b) and torch's F.linear with and without b, f16, torch tensors, a
decode step and a prefill of an 11008x4096 projection. Per call: host time (calls queued
behind a spin kernel) and time per call with events around 20 calls; every result
checked against dense. An sm90 f16/bf16 row bias rides the scaled epilogue as a float32
vector (no C; before session 18 it was folded into a full [M, N] C at each eager call).

    python scripts/device/probe_bias.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_eager import device_ms, relative_error, spin  # noqa: E402

M, K = 11008, 4096
TOKENS = (16, 4096)


def host_us(torch, call, calls: int = 100) -> float:
    """Host time per call, the GPU kept busy by a sleep kernel so no call waits on it."""
    call()
    torch.cuda.synchronize()
    spin(torch, 50.0)
    start = time.perf_counter()
    for _ in range(calls):
        call()
    took = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return took


def main():
    import torch

    import cutlass_sparse as cs

    g = torch.Generator(device="cuda").manual_seed(7)
    w = cs.prune_2to4(torch.randn(M, K, device="cuda", generator=g).half() * 0.02)
    sw = cs.compress(w)
    b = torch.randn(M, device="cuda", generator=g).half()
    print(f"{M}x{K} f16 weight, torch tensors; per call: host us (GPU busy) / us with events around 20 calls")
    for n in TOKENS:
        x = torch.randn(n, K, device="cuda", generator=g).half()
        ref = torch.nn.functional.linear(x.float(), w.float())
        rows = {
            "cs.linear(x, sw)": (lambda: cs.linear(x, sw), ref),
            "cs.linear(x, sw, bias=b)": (lambda: cs.linear(x, sw, bias=b), ref + b.float()),
            "F.linear(x, w)": (lambda: torch.nn.functional.linear(x, w), ref),
            "F.linear(x, w, b)": (lambda: torch.nn.functional.linear(x, w, b), ref + b.float()),
        }
        for name, (call, expect) in rows.items():
            err = relative_error(call(), expect)
            print(f"  {n:5d} tokens  {name:26s} {host_us(torch, call):7.1f} / {device_ms(torch, call) * 1e3:8.1f} us"
                  f"  {'ok' if err < 2e-2 else 'WRONG'} ({err:.1e})", flush=True)


if __name__ == "__main__":
    main()
