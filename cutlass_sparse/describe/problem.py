"""The Problem: what one sparse GEMM call asks, as one frozen, hashable value.

Built once from the user's operands (api.operands), it carries everything that decides
the kernel and its launch parameters, and nothing that changes from call to call with
the same shapes (pointers): it is its own plan-cache key. D = act(alpha * A @ B + beta * C).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

MAX_ALIGN = 16   # bytes: no kernel reads more than 16 bytes per access


def alignment_class(ptr: int) -> int:
    """The largest power of two (at most 16 bytes) that divides an address."""
    return MAX_ALIGN if ptr == 0 else min(ptr & -ptr, MAX_ALIGN)


@dataclass(frozen=True)
class Split:
    """How K is divided: slices and mode ("serial" or "parallel"); one slice is no split."""

    slices: int = 1
    mode: str = "serial"

    @property
    def parallel(self) -> bool:
        return self.slices > 1 and self.mode == "parallel"

    @property
    def serial(self) -> bool:
        return self.slices > 1 and self.mode == "serial"


@dataclass(frozen=True)
class Epilogue:
    """alpha * acc + beta * C (+ bias), then an activation (leaky_slope: leaky_relu's slope)."""

    alpha: float = 1.0
    beta: float = 0.0
    activation: str = "identity"
    leaky_slope: float = 0.01
    bias: str = "none"           # "none" | "rows" ([M] or [M, 1]) | "columns" ([1, N])
    scales: str = "none"         # sm90: "row_col", float32 scales per row and per column (and a row
                                 # bias) at run time
    out_scale: float = 1.0       # scaled epilogue: D = act(...) / out_scale (requantized 8-bit output)

    @property
    def reads_c(self) -> bool:
        return self.beta != 0.0


@dataclass(frozen=True)
class Operand:
    """How a dense operand sits in memory: layout, leading dimension (elements) and the
    alignment class of its address (bytes, at most 16)."""

    layout: str                  # "row" | "col"
    ld: int
    align: int


def x_layout(layout: str, k: int, n: int) -> str:
    """How a contiguous x [K, N] of this layout is read: a single column (N = 1, K > 1) is
    both row- and column-major, and reads as column-major (api.operands.matrix_layout)."""
    return "col" if n == 1 and k > 1 else layout


def allocated_d_layout(family: str, n: int, element_out: str, reads_c: bool = False, split_k=None) -> str:
    """The layout of a D the library allocates: row-major, except a single 16-bit column
    on sm90. [M, 1] is the same memory read column-major, which TMA writes in place,
    where a row-major D would round N up to 8 and stage x and D (two copies more per
    decode call). Not with C (a folded C is row-major) or a K split (untimed there)."""
    if family == "sm90" and n == 1 and element_out in ("f16", "bf16") and not reads_c and split_k in (None, 1):
        return "col"
    return "row"


def bias_by_vector(family: str, element: str, epilogue: Epilogue, split_k) -> bool:
    """Whether a row bias rides the sm90 scaled epilogue as a float32 vector by pointer
    (a null scale reads as 1), so the kernel has no C: sm90, 16-bit inputs (8-bit ones
    take their bias that way already), no C of the caller's (beta 0), no K split, and an
    activation the scaled epilogue has (not leaky_relu). Else the bias is folded into C."""
    return (family == "sm90" and element in ("f16", "bf16") and epilogue.beta == 0.0 and epilogue.scales == "none"
            and epilogue.activation != "leaky_relu" and split_k in (None, 1))


def folded_c(layout: str, m: int, n: int) -> Operand:
    """The C the library allocates to fold a bias into: [M, N] in D's layout, aligned."""
    return Operand(layout, n if layout == "row" else m, MAX_ALIGN)


@dataclass(frozen=True)
class Problem:
    """One sparse GEMM as asked: sizes, types, operand layouts, epilogue, split, device."""

    family: str                  # "sm80" | "sm90"
    m: int
    n: int
    k: int
    element: str                 # A and B ("f16", "bf16", "s8", "tf32")
    element_out: str             # C and D
    x: Operand                   # B
    out: Operand | None          # D when the caller passes it; None: the library allocates
    c: Operand | None            # C when beta != 0
    epilogue: Epilogue
    split_k: int | None          # None: the kernel choice decides
    split_k_mode: str | None
    device_id: int
    arch: str                    # the device's, e.g. "sm_90"
    sm_count: int
    element_x: str = ""          # B's type where it is not A's ("": the same; sm90 e4m3 x e5m2)

    def __post_init__(self):
        if self.element_x == self.element:   # one problem, one key: "" where x's type is A's
            object.__setattr__(self, "element_x", "")

    def with_(self, **changes) -> "Problem":
        """This Problem with some fields replaced: dataclasses.replace without its field
        walk (a few microseconds on every new N of an eager loop). No field is derived
        from another, so there is nothing to recompute."""
        new = object.__new__(Problem)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new

    def with_bias(self, kind: str = "rows") -> "Problem":
        """This Problem with a bias, as cs.matmul and cs.linear run one: a row bias as the
        sm90 scaled epilogue's vector where bias_by_vector says so (no C), else folded
        into a C of D's layout (beta 1), so the kernel has C."""
        if kind == "rows" and bias_by_vector(self.family, self.element, self.epilogue, self.split_k):
            return self.with_(epilogue=dataclasses.replace(self.epilogue, bias=kind, scales="row_col"))
        layout = "row" if self.out is None else self.out.layout
        return self.with_(c=folded_c(layout, self.m, self.n),
                          epilogue=dataclasses.replace(self.epilogue, beta=1.0, bias=kind))

    @property
    def layout_b(self) -> str:
        return self.x.layout

    @property
    def layout_d(self) -> str:
        """D's layout: the caller's out's, else allocated_d_layout's."""
        if self.out is not None:
            return self.out.layout
        return allocated_d_layout(self.family, self.n, self.element_out, self.epilogue.reads_c, self.split_k)

    @property
    def x_element(self) -> str:
        """x's (B's) element type: element_x, or A's."""
        return self.element_x or self.element

    @property
    def split(self) -> Split:
        return Split(self.split_k or 1, self.split_k_mode or "serial")

    @property
    def activation(self) -> str:
        return self.epilogue.activation

    @classmethod
    def contiguous(cls, family: str, m: int, n: int, k: int, *, element: str = "f16", element_out: str | None = None,
                   layout_b: str = "row", activation: str = "identity", arch: str = "sm_90",
                   sm_count: int = 132, device_id: int = 0, out_layout: str | None = None) -> "Problem":
        """The problem of freshly allocated operands (x [K, N] in `layout_b`; D allocated by
        the library, or by the caller in `out_layout`, as cs.linear does): what warm-up,
        compile-only runs and the profiler's kernel list plan for."""
        x = Operand(layout_b, n if layout_b == "row" else k, MAX_ALIGN)
        out = None if out_layout is None else Operand(out_layout, n if out_layout == "row" else m, MAX_ALIGN)
        return cls(family, m, n, k, element, element_out or element, x, out, None, Epilogue(activation=activation),
                   None, None, device_id, arch, sm_count)
