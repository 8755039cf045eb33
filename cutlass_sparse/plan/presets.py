"""Warm-up presets: sets of kernels worth shipping to a fleet.

A preset is a list of problems; its kernels are the ones the family plans pick for them
by default (no profiler record, no split), found by making each plan up to the point
where it asks for its kernel (kernels.first_asked: nothing compiled, no GPU). So a
preset follows the selection heuristics as they change, without restating them.
"""
from __future__ import annotations

import math

from ..build import kernels
from ..describe import catalog, dtypes, selection
from ..describe.helper_kernels import LineCopyConfig
from ..describe.problem import Problem, x_layout
from . import plans

# (model, fused QKV rows, MLP intermediate size) per hidden size: dense LLMs whose
# projections a fleet serves. QKV is grouped-query (Llama 3, Mistral) or multi-head (Llama 2).
MODELS = {
    4096: (("Llama-3-8B, Mistral-7B", 6144, 14336), ("Llama-2-7B", 12288, 11008)),
    5120: (("Llama-2-13B", 15360, 13824),),
    8192: (("Llama-2-70B, Llama-3-70B", 10240, 28672),),
}
PRESETS = {"llm": (4096, 5120, 8192), "llm-4096": (4096,), "llm-5120": (5120,), "llm-8192": (8192,)}
DTYPES = ("f16", "bf16")
# x as cs.matmul takes it ([K, N] row-major) and as cs.linear reads x [tokens, K] (column-major,
# with D as cs.linear has it written: _out_layout).
LAYOUTS = ("row", "col")
N_MAX = 8192          # tokens per call: decode batches up to long prefill chunks
# The GPU each target's SM count is taken from (waves of tiles depend on it).
SM_COUNTS = {"sm_80": 108, "sm_90": 132, "sm_90a": 132}   # A100, H100


def projections(hidden: int) -> list[tuple[int, int]]:
    """(M, K) = (out features, in features) of QKV, attention output, MLP up and gate (each,
    and fused), down."""
    shapes = []
    for _, qkv, ffn in MODELS[hidden]:
        shapes += [(qkv, hidden), (hidden, hidden), (ffn, hidden), (2 * ffn, hidden), (hidden, ffn)]
    return list(dict.fromkeys(shapes))


def token_counts(n_max: int = N_MAX, family: str = "sm80") -> list[int]:
    """N values standing for every N in 1..n_max for a family's default selection: one N of
    each alignment (1, 2, 4 or 8 elements) in each interval of N that selection tells apart.
    The sm90 family's are N's selection ranges (selection.n_range: it chooses a kernel for
    a range's end, and the rest follows from alignment and N = 1), and the last N of each
    tile count of the tiles whose stream-K twin may run instead; the sm80 family sees N
    through the tiles along N (ceil(N / tile N)), so its intervals are `step` wide, every
    catalog tile's N a multiple of it. Tests check both against every N on a smaller range."""
    twin_ns = set()
    if family == "sm90":
        starts, low = [], 0
        while low < n_max:
            starts.append(low)
            low = selection.n_range(low + 1)
        # where a tile's stream-K twin may run (selection.TAIL_TWINS), the choice follows the
        # tiles along N too: the last N of each tile count (the kernel of an N that is not in
        # whole vectors is the aligned N's: the plan stages x and D)
        step = math.gcd(*(tile[1] for tile, _ in selection.TAIL_TWINS))
        twin_ns = set(range(step, n_max + 1, step))
    else:
        step = math.gcd(*(tile[0][1] for tile in catalog.load(family).tiles))
        assert step % 8 == 0, step      # else low + 8 would not stand for 8-aligned N
        starts = range(0, n_max, step)
    return sorted(twin_ns | {low + r for low in starts for r in (1, 2, 4, 8) if low + r <= n_max})


def family_of(arch: str) -> tuple[str, str]:
    """(family, the GPU's arch a plan runs on) for a compile target: sm_90a is the sm90
    family on an sm_90 GPU; every other target the sm80 family on a GPU of that arch."""
    return ("sm90", "sm_90") if arch == "sm_90a" else ("sm80", arch)


def problems(name: str, arch: str, sm_count: int, n_max: int = N_MAX) -> list[Problem]:
    """The preset's problems: each projection without a bias and, for the sm90 family (whose
    calls without C run kernels without C), with one (folded into C, as cs.linear does)."""
    family, gpu = family_of(arch)
    # x [K, 1] reads as column-major whichever way it was made (x_layout): one problem
    plain = [Problem.contiguous(family, m, n, k, element=dtype, layout_b=layout, arch=gpu, sm_count=sm_count,
                                out_layout=_out_layout(family, layout, n, dtype))
             for hidden in PRESETS[name] for m, k in projections(hidden) for dtype in DTYPES
             for n in token_counts(n_max, family) for layout in dict.fromkeys(x_layout(made, k, n) for made in LAYOUTS)]
    if family != "sm90":   # sm80 kernels always have C: a bias runs the same one
        return plain
    return plain + [p.with_bias() for p in plain]


def _out_layout(family: str, layout: str, n: int, dtype: str) -> str | None:
    """D as the call writes it: cs.linear (x column-major) has the sm90 family write D
    column-major at token counts a row-major D would stage (selection.linear_out_layout);
    None: D the library allocates (Problem.layout_d)."""
    if family != "sm90" or layout != "col":
        return None
    out = selection.linear_out_layout(n, dtypes.numpy_dtype(dtype).itemsize)
    return out if out == "col" else None


def items(name: str, archs: list[str], sm_counts: dict[str, int] | None = None,
          n_max: int = N_MAX) -> list[tuple[object, str]]:
    """(kernel, compile target) for every kernel of a preset on these targets, in a fixed
    order: what default selection picks for each problem (cs.compress compiles nothing).
    sm_counts: per target, else SM_COUNTS (KeyError if neither)."""
    found = []
    for arch in archs:
        arch = kernels.normalize_arch(arch)
        count = (sm_counts or {}).get(arch) or SM_COUNTS[arch]
        for problem in problems(name, arch, count, n_max):
            asked = kernels.first_asked(lambda: plans.make(problem))
            if asked is not None:   # one entry per binary (swizzles share one)
                found.append((asked[0].as_compiled(), kernels.normalize_arch(asked[1])))
        if family_of(arch)[0] == "sm90":   # what stages an odd N or a misaligned view at run time
            found.append((LineCopyConfig(), "sm_90a"))
    return list(dict.fromkeys(found))
