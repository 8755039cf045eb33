"""The helper kernels' descriptions, beside the GEMM's (description.py): the parallel
split-K reduction, the staging copy and the sm90 compressor. Each is a frozen value whose
name is its kernel's identity and C++ symbol, as a SparseGemmConfig's is."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from cutlass_library.library import DataType

from . import dtypes
from .description import ACTIVATIONS


@dataclass(frozen=True)
class ReductionConfig:
    """The parallel split-K reduction (family "sm80_reduction"): sums fp32 partial tiles
    [slices, M, N] and applies the epilogue (alpha, beta, C, activation) into D."""

    element_out: str
    alignment: int                   # elements per access of D, C and the workspace
    activation: str = "identity"
    family: str = "sm80_reduction"

    def __post_init__(self):
        if self.element_out not in ("f16", "bf16", "f32"):
            raise ValueError(f"element_out {self.element_out!r} must be 'f16', 'bf16' or 'f32'")
        if self.alignment not in (1, 2, 4, 8):
            raise ValueError(f"alignment {self.alignment} must be 1, 2, 4 or 8")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation {self.activation!r} must be one of {sorted(ACTIVATIONS)}")

    @property
    def name(self) -> str:
        return f"cutlass_sparse_reduce_splitk_f32_{self.element_out}_align{self.alignment}_{self.activation}"

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class LineCopyConfig:
    """The staging copy (family "line_copy"): lines of bytes from one pitch to another, one
    entry per access width (1 to 16 bytes). It stages what TMA cannot read into aligned
    buffers and a staged D back into the caller's array, as a kernel: a 2-D memcpy of
    narrow lines is slow on the copy engine, and a copy between two programmatic launches
    breaks their overlap."""

    family: str = "line_copy"

    UNITS = (1, 2, 4, 8, 16)

    @property
    def name(self) -> str:
        return "cutlass_sparse_copy_lines"

    def entry(self, unit: int) -> str:
        return f"{self.name}_u{unit}"

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CompressorConfig:
    """CUTLASS's sm90 2:4 compressor for one element type (family "sm90_compressor")."""

    element: str
    family: str = "sm90_compressor"
    atom_k: int = 128                # K of the metadata layout atom (SparseGemmConfig.atom_k)

    def __post_init__(self):
        if self.atom_k not in (64, 128):
            raise ValueError(f"atom_k {self.atom_k} must be 64 or 128 (tile K 64, or 128 and above)")

    @property
    def data_type(self) -> DataType:
        return dtypes.data_type(self.element)

    @property
    def name(self) -> str:
        suffix = "" if self.atom_k == 128 else f"_k{self.atom_k}"
        return f"cutlass3x_sm90_sparse_compressor_{self.element}{suffix}"

    def to_json(self) -> dict:
        return asdict(self)
