"""The sm90 setup entry's argument block (emit.sm90's SETUP and SETUP_SCALED layouts): a
plan's fixed fields packed once (block), then each setup launch's pointers and nonce
(arguments)."""
from __future__ import annotations

import itertools
import struct

from ..emit.sm90 import DECOMPOSITIONS, SETUP_SCALED, setup_layout
from .sm90_params import NO_VECTORS

# The block's leading pointers, in field order: a, e, b, c, d, params_out, templates,
# recipes_out, info_out, workspace.
_POINTERS = struct.Struct("<10Q")
_NONCE = struct.Struct("<I")
_VECTORS = struct.Struct("<3Q")   # SETUP_SCALED's row_scales, column_scales and row_bias
# Each setup launch's nonce, which marks the TMA recipes it writes (see emit.sm90): unique in
# the process, so no recipe an earlier setup left in local memory passes for one of its own.
# Spread over 31 bits with the top bit set, not 1, 2, 3...: the scan for recipes (64-byte
# steps) also reads a nonce's place inside a real recipe 64 bytes on, where a small tensor
# size sits (dims[0]); a stale magic before it plus a counter equal to that size made a
# look-alike slot (rank 0, session 16's one-off failure).
_nonces = itertools.count(1)


def next_nonce() -> int:
    """The next setup's nonce: a bijection of a counter onto [2**31, 2**32)."""
    return 0x80000000 | (next(_nonces) * 0x9E3779B1) & 0x7FFFFFFF


def block(plan) -> bytearray:
    """A plan's setup block without its pointers (filled per build)."""
    p, e, k = plan.problem, plan.problem.epilogue, plan.kernel_problem
    layout = setup_layout(plan.config)
    scaled = {"out_multiplier": 1.0 / e.out_scale} if layout is SETUP_SCALED else {}
    return layout.pack(
        ldb=k.x.ld, ldc=plan.ldc, ldd=plan.ldd, m=k.m, n=k.n, k=k.k, sm_count=p.sm_count,
        swizzle=plan.swizzle, raster=plan.raster, splits=plan.scheduling.splits,
        decomposition=DECOMPOSITIONS[plan.scheduling.decomposition],
        alpha=e.alpha, beta=e.beta, activation_arg=e.leaky_slope, **scaled)


def arguments(plan, pointers, params, templates=0, recipes_out=0, info_out=0, workspace=0, scales=NO_VECTORS):
    """The setup entry's argument for one launch: the plan's block with these pointers
    and a fresh nonce."""
    filled = bytearray(plan._block)
    _POINTERS.pack_into(filled, 0, *pointers, params, templates, recipes_out, info_out, workspace)
    layout = setup_layout(plan.config)
    _NONCE.pack_into(filled, layout.offsets["nonce"], next_nonce())
    if layout is SETUP_SCALED:   # a null scale reads as 1, a null bias as 0
        _VECTORS.pack_into(filled, layout.offsets["row_scales"], *scales)
    elif any(scales):
        raise ValueError(f"{plan.config.name} takes no scales (its epilogue is not a scaled one)")
    return layout.as_argument(filled)
