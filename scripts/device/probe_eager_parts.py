#!/usr/bin/env python3
"""Where a repeated eager call's host time goes (GPU machine): each piece of the torch
fast path timed alone in a loop (median of rounds), beside the whole call and torch.mm;
then the device time of the staging copies an odd N pays (cudaMemcpy2DAsync with narrow
rows against an elementwise copy)."""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse.api import eager, eager_keys, interop, matmul as api_matmul  # noqa: E402
from bench_eager import device_ms  # noqa: E402
from cutlass_sparse.launch import staging  # noqa: E402


def host_us(call, calls=2000, rounds=5):
    for _ in range(50):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def device_us(call, repeats=50):
    """Time per call with CUDA events around `repeats` calls (bench_eager.device_ms, in us)."""
    return device_ms(torch, call, repeats=repeats, rounds=1) * 1e3


def main():
    m, n, k = 128, 64, 128
    w = cs.prune_2to4(torch.randn(m, k, device="cuda").half())
    sw = cs.compress(w)
    x = torch.randn(k, n, device="cuda").half()
    tokens = torch.randn(n, k, device="cuda").half()
    out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    cs.matmul(sw, x, out=out)
    cs.linear(tokens, sw)
    options = api_matmul._DEFAULT_OPTIONS
    fast = eager_keys.torch_key(sw, x, out, options)
    entry = eager.lookup(fast)
    plan = entry.plan
    stream = interop.torch_stream(0)
    ready = plan.ready(sw, (x.data_ptr(), out.data_ptr(), out.data_ptr()), None, stream)
    rows = {
        "cs.matmul(sw, x)": lambda: cs.matmul(sw, x),
        "cs.matmul(sw, x, out=out)": lambda: cs.matmul(sw, x, out=out),
        "cs.linear(tokens, sw)": lambda: cs.linear(tokens, sw),
        "torch.mm(w, x)": lambda: torch.mm(w, x),
        "torch.mm(w, x, out=out)": lambda: torch.mm(w, x, out=out),
        "  torch.empty(m, n)": lambda: torch.empty((m, n), dtype=torch.float16, device=x.device),
        "  entry.new_out": lambda: entry.new_out(x),
        "  eager_keys.torch_key": lambda: eager_keys.torch_key(sw, x, out, options),
        "  eager.lookup": lambda: eager.lookup(fast),
        "  eager.torch_run": lambda: eager.torch_run(entry, sw, x, out),
        "    interop.torch_stream": lambda: interop.torch_stream(0),
        "    cupy getDevice": lambda: cupy.cuda.runtime.getDevice(),
        "    plan.launch_direct": lambda: plan.launch_direct(sw, x.data_ptr(), out.data_ptr(), stream),
        "      plan.ready (hit)": lambda: plan.ready(sw, (x.data_ptr(), out.data_ptr(), out.data_ptr()), None, stream),
        "      plan.launch": lambda: plan.launch(ready, stream),
        "      sw.metadata_for": lambda: sw.metadata_for(plan.atom_k, stream),
        "  x.T": lambda: x.T,
        "  tensor.data_ptr()": lambda: x.data_ptr(),
        "  tensor.stride()": lambda: x.stride(),
        "  tensor.get_device()": lambda: x.get_device(),
        "  eager_keys.torch_attrs": lambda: eager_keys.torch_attrs(x),
    }
    print(f"host us per call, {m}x{n}x{k} f16, torch tensors (median of 5 rounds of 2000)")
    for name, call in rows.items():
        print(f"  {name:34s} {host_us(call):7.2f}")

    # the staging copies of an odd N (4096 rows of 7 halves -> pitch 8, and back)
    print("\ndevice us per copy (4096 rows, f16)")
    for cols in (7, 8, 15, 4095):
        src = cupy.random.standard_normal((4096, cols)).astype(cupy.float16)
        ld = (cols + 7) // 8 * 8
        dst = cupy.empty((4096, ld), dtype=cupy.float16)
        t2d = device_us(lambda: staging.copy_lines(dst.data.ptr, ld * 2, src.data.ptr, cols * 2, cols * 2, 4096))
        tel = device_us(lambda: dst[:, :cols].__setitem__(Ellipsis, src))
        host2d = host_us(lambda: staging.copy_lines(dst.data.ptr, ld * 2, src.data.ptr, cols * 2, cols * 2, 4096),
                         calls=200, rounds=3)
        print(f"  [4096, {cols}] -> ld {ld}: memcpy2D {t2d:8.1f} us (host {host2d:5.1f}), elementwise {tel:8.1f} us")
    # the odd-N call itself, device time per call with the host included
    w2 = cs.prune_2to4(torch.randn(4096, 4096, device="cuda").half())
    sw2 = cs.compress(w2)
    for cols in (7, 8):
        x2 = torch.randn(4096, cols, device="cuda").half()
        t = device_us(lambda: cs.matmul(sw2, x2), repeats=20)
        h = host_us(lambda: cs.matmul(sw2, x2), calls=100, rounds=3)
        tok = torch.randn(cols, 4096, device="cuda").half()
        t_lin = device_us(lambda: cs.linear(tok, sw2), repeats=20)
        print(f"  cs.matmul 4096x{cols}x4096 row-major x: {t:6.1f} us per call (host {h:5.1f}); "
              f"cs.linear: {t_lin:6.1f} us")
        if cols == 7:
            import cProfile
            import pstats

            profile = cProfile.Profile()
            profile.runcall(lambda: [cs.matmul(sw2, x2) for _ in range(500)])
            torch.cuda.synchronize()
            print("\ncs.matmul 4096x7x4096 (row-major x), 500 calls, by own time:")
            pstats.Stats(profile).sort_stats("tottime").print_stats(16)


if __name__ == "__main__":
    main()
