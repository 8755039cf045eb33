#!/usr/bin/env python3
"""Where a biased eager cs.linear's host time goes (GPU machine): 16 tokens of an
11008x4096 f16 layer, the call with and without bias, then its pieces timed alone and
the biased call under cProfile.

    python scripts/device/probe_bias_host.py
"""
from __future__ import annotations

import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_bias import host_us  # noqa: E402


def main():
    import torch

    import cutlass_sparse as cs
    from cutlass_sparse.api import eager, eager_keys, interop, matmul as api_matmul

    g = torch.Generator(device="cuda").manual_seed(7)
    w = cs.prune_2to4(torch.randn(11008, 4096, device="cuda", generator=g).half() * 0.02)
    sw = cs.compress(w)
    b = torch.randn(11008, device="cuda", generator=g).half()
    x = torch.randn(16, 4096, device="cuda", generator=g).half()
    options = api_matmul._activation_options("identity")
    cs.linear(x, sw, bias=b)
    found = eager_keys.linear_key(x, sw, options, b)
    entry = eager.lookup(found[0])
    print(f"hit: {entry is not None}, direct: {entry.plan.direct if entry else '-'}, "
          f"config: {entry.plan.config.name if entry else '-'}")
    y = entry.linear_out(x, found[1])
    stream = interop.torch_stream(0)
    vector = b.float()
    rows = {
        "cs.linear(x, sw)": lambda: cs.linear(x, sw),
        "cs.linear(x, sw, bias=b)": lambda: cs.linear(x, sw, bias=b),
        "linear_key with bias": lambda: eager_keys.linear_key(x, sw, options, b),
        "lookup": lambda: eager.lookup(found[0]),
        "b.reshape(-1).float().contiguous()": lambda: b.reshape(-1).float().contiguous(),
        "new_out": lambda: entry.linear_out(x, found[1]),
        "launch_direct, scales": lambda: entry.plan.launch_direct(sw, x.data_ptr(), y.data_ptr(), stream,
                                                                  scales=(0, 0, vector.data_ptr())),
        "torch_run with bias": lambda: eager.torch_run(entry, sw, x, y, b),
    }
    for name, call in rows.items():
        print(f"  {name:36s} {host_us(torch, call):7.1f} us", flush=True)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(200):
        cs.linear(x, sw, bias=b)
    profile.disable()
    torch.cuda.synchronize()
    pstats.Stats(profile).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
