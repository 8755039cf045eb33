#!/usr/bin/env python3
"""Issue 11 probe (GPU machine): how a kernel's Params depend on the operands' pointers and
on N, and how the driver stores a TMA descriptor's global address. Prints, per pointer
(a, e, b, c, d) moved by 16 bytes and by 1 MiB, the 8-byte words of Params that change
(offset, old, new); for N against N + 8, the words that change; and for a descriptor the
driver encodes at several addresses, the words that change."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from cutlass_sparse.describe.problem import Problem  # noqa: E402
from cutlass_sparse.launch import tma  # noqa: E402
from cutlass_sparse.plan import plans  # noqa: E402


def descriptor_words(address):
    recipe = np.zeros(1, dtype=tma.RECIPE)[0]
    recipe["magic"], recipe["address"], recipe["dtype"], recipe["rank"] = tma.MAGIC, address, 6, 2
    recipe["dims"][:2], recipe["strides"][:1], recipe["box"][:2], recipe["elem"][:2] = (4096, 4096), (8192,), \
        (64, 64), (1, 1)
    recipe["swizzle_bits"] = 3
    return np.frombuffer(tma.encode(recipe), dtype=np.uint64)


def diff(a, b, label):
    changed = np.nonzero(a != b)[0]
    print(f"  {label}: {len(changed)} words change: " + ", ".join(
        f"@{8 * int(w)} {int(a[w]):#x} -> {int(b[w]):#x}" for w in changed[:12]), flush=True)


def main():
    cupy.zeros(1)   # a context for the driver's encoder
    base = 0x7F0000000000
    words = descriptor_words(base)
    print("descriptor at base:", " ".join(f"{int(w):#x}" for w in words))
    for delta in (16, 32, 1 << 20, 1 << 32, 1 << 40):
        diff(words, descriptor_words(base + delta), f"address + {delta:#x}")
    from sweep_8bit import CANDIDATES
    config = CANDIDATES[1]
    scratch = cupy.zeros(1 << 24, dtype=cupy.uint8)
    start = (scratch.data.ptr + 4095) // 4096 * 4096

    def params_of(n, pointers):
        problem = Problem.contiguous("sm90", 4096, n, 4096, element="e4m3", element_out="bf16", layout_b="col")
        plan = plans.make(problem, config)
        prepared = plan._prepared(pointers)
        params = cupy.zeros(plan.compiled.constants["params_bytes"], dtype=cupy.uint8)
        setup = plan.loaded.function(problem.device_id, f"{plan.compiled.symbol}_setup")
        setup((1, 1, 1), (1, 1, 1), (plan._setup_arguments(pointers, params.data.ptr, prepared.templates.data.ptr),),
              shared_mem=0)
        return params.get().view(np.uint64)

    pointers = tuple(start + (1 << 20) * i for i in range(5))
    ref = params_of(256, pointers)
    print(f"\nParams of {config.name}: {ref.nbytes} bytes")
    for i, name in enumerate("aebcd"):
        for delta in (16, 1 << 19):
            moved = tuple(p + delta if j == i else p for j, p in enumerate(pointers))
            diff(ref, params_of(256, moved), f"{name} + {delta:#x}")
    for n in (264, 512, 7 * 8):
        diff(ref, params_of(n, pointers), f"N 256 -> {n}")


if __name__ == "__main__":
    main()
