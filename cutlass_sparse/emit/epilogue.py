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


def fusion_3x(activation: str, element_out: str) -> str:
    """CUTLASS 3.x epilogue fusion operation for the sm90 epilogue builder."""
    if activation == "identity":   # the builder's own default
        return f"cutlass::epilogue::fusion::LinearCombination<{element_out}, float, {element_out}, float>"
    return (f"cutlass::epilogue::fusion::LinCombEltAct<{activation_functor(activation)}, "
            f"{element_out}, float, {element_out}, float>")


def set_activation_arg_3x(activation: str, arguments: str, activation_arg: str) -> str:
    if activation == "leaky_relu":
        return f"  {arguments}.epilogue.thread.activation.leaky_alpha = {activation_arg};"
    return ""
