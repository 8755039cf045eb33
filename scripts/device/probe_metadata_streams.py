#!/usr/bin/env python3
"""A weight's metadata converted for a tile-K-64 kernel (atom 64) on first use: is it
ready for the next call on another stream, and for an eager call after a capture that
made it (GPU machine)? Each case on a fresh weight, 4096x4096x4096 f16 (the 128x256x64
kernel), checked against torch.mm.

    python scripts/device/probe_metadata_streams.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    import torch

    import cutlass_sparse as cs

    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(4096, 4096, device="cuda", generator=g).half()
    bad = 0

    def weight():
        w = cs.prune_2to4(torch.randn(4096, 4096, device="cuda", generator=g).half())
        torch.cuda.synchronize()
        return w, cs.compress(w)

    def check(name, y, w):
        nonlocal bad
        torch.cuda.synchronize()
        ref = w.float() @ x.float()
        err = float((y.float() - ref).norm() / ref.norm())
        bad += not err < 2e-2
        print(f"  {name:60s} rel err {err:.1e} {'ok' if err < 2e-2 else 'WRONG'}", flush=True)

    for round_ in range(3):
        # 1. first use on a busy stream S, then at once on stream T (not ordered after S)
        w, sw = weight()
        s, t = torch.cuda.Stream(), torch.cuda.Stream()
        with torch.cuda.stream(s):
            torch.cuda._sleep(50_000_000)    # S busy for tens of ms: its conversion waits
            y_s = cs.matmul(sw, x)
        with torch.cuda.stream(t):
            y_t = cs.matmul(sw, x)
        check(f"round {round_}: first call on a busy stream", y_s, w)
        check(f"round {round_}: next call on another stream at once", y_t, w)

    # 2. first use inside a torch graph capture, then an eager call with no replay
    w, sw = weight()
    out = torch.empty(4096, 4096, device="cuda", dtype=torch.float16)
    capture_stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, stream=capture_stream):
            cs.matmul(sw, x, out=out)
        y = cs.matmul(sw, x)
        check("eager call after a capture that converted the metadata", y, w)
        graph.replay()
        check("the replay", out, w)
    except Exception as exc:   # noqa: BLE001 - reported, the probe goes on
        import traceback

        cause = exc.__context__ or exc
        print(f"  capture: {type(exc).__name__}: {str(exc)[:200]}")
        print("".join(traceback.format_exception(type(cause), cause, cause.__traceback__))[-3000:])
        bad += 1
    print(f"{bad} wrong or failed")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
