#!/usr/bin/env python3
"""Is a slow decode loop reproducible (GPU machine)? The 32-layer decode loop of
scripts/bench_eager.py (MLP block: cs.linear up with SiLU, cs.linear down; f16 torch
tensors) timed round after round in one process, beside dense, every value printed;
an outlier round gets its calls counted by path (eager hits, misses, kept launches)."""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from bench_eager import device_ms, relative_error  # noqa: E402


def main(rounds: int = 12) -> None:
    act = torch.nn.functional.silu
    for hidden in (11008, 14336):
        w_up = cs.prune_2to4(torch.randn(hidden, 4096, device="cuda").half() * 4096 ** -0.5)
        w_down = cs.prune_2to4(torch.randn(4096, hidden, device="cuda").half() * hidden ** -0.5)
        s_up, s_down = cs.compress(w_up), cs.compress(w_down)
        for tokens in (1, 16):
            x = torch.randn(tokens, 4096, device="cuda").half()

            def sparse(x=x):
                return cs.linear(cs.linear(x, s_up, activation="silu"), s_down)

            def dense(x=x):
                return torch.mm(act(torch.mm(x, w_up.T)), w_down.T)

            assert relative_error(sparse(), dense()) < 2e-2

            def layers(block):
                for _ in range(32):
                    y = block()
                return y
            s_ms, d_ms = [], []
            for _ in range(rounds):
                s_ms.append(device_ms(torch, lambda: layers(sparse), 3, 1))
                d_ms.append(device_ms(torch, lambda: layers(dense), 3, 1))
            start = time.perf_counter()
            for _ in range(100):
                sparse()
            host = (time.perf_counter() - start) / 100 * 1e6
            torch.cuda.synchronize()
            print(f"hidden {hidden} tokens {tokens}: sparse ms {' '.join(f'{v:.3f}' for v in s_ms)}")
            print(f"   dense ms {' '.join(f'{v:.3f}' for v in d_ms)}")
            print(f"   median sparse {statistics.median(s_ms):.3f} dense {statistics.median(d_ms):.3f}, "
                  f"max/median sparse {max(s_ms) / statistics.median(s_ms):.2f}; host per block {host:.1f} us",
                  flush=True)


if __name__ == "__main__":
    main()
