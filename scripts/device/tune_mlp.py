#!/usr/bin/env python3
"""Profile every sm90 candidate for the MLP block's GEMMs at 512 tokens (GPU machine):
which tile wins where the heuristic's choice trails dense. Prints each table's top rows
and the heuristic's pick."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402


def main():
    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    for width, hidden in ((4096, 11008), (4096, 14336)):
        for m, k, activation in ((hidden, width, "silu"), (width, hidden, "identity")):
            w = cs.prune_2to4(torch.randn(m, k, device="cuda").half() * k ** -0.5)
            sw = cs.compress(w)
            x = torch.randn(tokens, k, device="cuda").half()
            info = {}
            cs.matmul(sw, x.T, activation=activation, info=info)
            winner, rows = cs.tune(sw, x.T, activation=activation, jobs=16)
            print(f"\n{m}x{tokens}x{k} {activation}: heuristic {info['config']}")
            for r in rows[:6]:
                print(f"  {r.choice.label:48s} {r.ms * 1e3 if r.ms else float('nan'):8.1f} us  {r.status}")


if __name__ == "__main__":
    main()
