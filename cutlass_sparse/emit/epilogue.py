"""The epilogue as C++: alpha * accumulator + beta * C, then an activation.

One place names CUTLASS's functors for both families and for the split-K reduction, so
that a GEMM's epilogue and the reduction that finishes a parallel split-K agree.
"""
from __future__ import annotations

from ..describe.description import ACTIVATIONS

THREAD = "cutlass::epilogue::thread"


def activation_functor(activation: str) -> str:
    return f"{THREAD}::{ACTIVATIONS[activation]}"


def output_op_2x(activation: str, element_out: str, count: int, accumulator: str = "float") -> str:
    """CUTLASS 2.x thread-level output operator (alpha and beta in float). An int8 output
    is rounded and clamped to its range (LinearCombinationClamp)."""
    if element_out == "int8_t":
        return f"{THREAD}::LinearCombinationClamp<{element_out}, {count}, {accumulator}, float>"
    if activation == "identity":
        return f"{THREAD}::LinearCombination<{element_out}, {count}, {accumulator}, float>"
    return (f"{THREAD}::LinearCombinationGeneric<{activation_functor(activation)}, {element_out}, {count}, "
            f"{accumulator}, float>")


def output_params_2x(op: str, alpha: str, beta: str, activation_arg: str, activation: str) -> str:
    """A C++ expression building `op`'s Params (leaky_relu's slope rides in them)."""
    if activation == "leaky_relu":
        return (f"([&] {{ typename {op}::Params p({alpha}, {beta}); "
                f"p.leaky_alpha = {activation_arg}; return p; }}())")
    return f"typename {op}::Params({alpha}, {beta})"


def compute_type(element_out: str) -> str:
    """The sm90 epilogue's arithmetic type: int32 for an int32 D (the raw int8 accumulator
    stays exact past float's 24 bits; alpha and beta are taken as integers), else float."""
    return "int32_t" if element_out == "s32" else "float"


def fusion_3x(activation: str, element_out: str, compute: str = "float") -> str:
    """CUTLASS 3.x epilogue fusion operation for the sm90 epilogue builder."""
    if activation == "identity":   # the builder's own default
        return f"cutlass::epilogue::fusion::LinearCombination<{element_out}, {compute}, {element_out}, float>"
    return (f"cutlass::epilogue::fusion::LinCombEltAct<{activation_functor(activation)}, "
            f"{element_out}, float, {element_out}, float>")


def set_activation_arg_3x(activation: str, arguments: str, activation_arg: str) -> str:
    if activation == "leaky_relu":
        return f"  {arguments}.epilogue.thread.activation.leaky_alpha = {activation_arg};"
    return ""


# D = activation(alpha * row_scale[m] * column_scale[n] * acc + row_bias[m]) * out_multiplier:
# the scales of a quantized weight (one per output feature) and of its activations (one
# per token), the layer's bias, and a requantizing output scale applied after the
# activation (act(y) / s is not act(y / s) for most activations), as an epilogue visitor
# tree. A null scale pointer reads as 1, a null bias as 0 (the broadcasts' null_default).
SCALED_FUSION = "ScaledFusionOf<TileShape>"
_EVT = "cutlass::epilogue::fusion"


def scaled_fusion_3x(activation: str, element_out: str) -> str:
    """The C++ declaration of the tree SCALED_FUSION names (emitted before the tile shape
    is known, so a template of it)."""
    nearest = "cutlass::FloatRoundStyle::round_to_nearest"
    mul = f"{_EVT}::Sm90Compute<cutlass::multiplies, float, float, {nearest}>"
    per_row = f"{_EVT}::Sm90ColBroadcast<0, Tile, float, float, Stride<_1, _0, int64_t>>"   # one per row of D
    return f"""template <class Tile>
using ScaledFusionOf = {_EVT}::Sm90EVT<
    {_EVT}::Sm90Compute<cutlass::multiplies, {element_out}, float, {nearest}>,
    {_EVT}::Sm90ScalarBroadcast<float>,                                   // out_multiplier
    {_EVT}::Sm90EVT<
        {_EVT}::Sm90Compute<{activation_functor(activation)}, float, float, {nearest}>,
        {_EVT}::Sm90EVT<{_EVT}::Sm90Compute<cutlass::plus, float, float, {nearest}>,
            {_EVT}::Sm90EVT<{mul},
                {_EVT}::Sm90ScalarBroadcast<float>,                       // alpha
                {_EVT}::Sm90EVT<{mul},
                    {per_row},                                            // row scales
                    {_EVT}::Sm90EVT<{mul},
                        {_EVT}::Sm90RowBroadcast<0, Tile, float, float, Stride<_0, _1, int64_t>>,   // column scales
                        {_EVT}::Sm90AccFetch>>>,
            {per_row}>>>;                                                 // row bias"""


def set_scales_3x(arguments: str, args: str) -> str:
    """Fill the tree's arguments: each node's are {op_0, op_1, ...}, its children first,
    then its own operation."""
    return f"""  {{
    auto& tree = {arguments}.epilogue.thread;
    tree.op_0.scalars[0] = {args}.out_multiplier;
    auto& biased = tree.op_1.op_0;
    auto& scaled = biased.op_0;
    scaled.op_0.scalars[0] = {args}.alpha;
    auto& rows = scaled.op_1;
    rows.op_0.ptr_col = static_cast<float const *>({args}.row_scales);
    rows.op_0.null_default = 1.0f;
    auto& columns = rows.op_1;
    columns.op_0.ptr_row = static_cast<float const *>({args}.column_scales);
    columns.op_0.null_default = 1.0f;
    biased.op_1.ptr_col = static_cast<float const *>({args}.row_bias);
    biased.op_1.null_default = 0.0f;
  }}"""
