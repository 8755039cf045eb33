"""Kernel argument blocks: small POD structs, laid out here and checked by the compiler.

Kernel Params of CUTLASS hold precomputed state whose layout we cannot see without a
host compiler. So each emitted entry takes one of these structs by value and builds
CUTLASS's Params on the device. Python owns the struct's layout; the emitter writes
the C++ definition with static_asserts that fail the compile if C++ would lay it out
differently (and the loader compares the kernel's parameter size read from the cubin).
"""
from __future__ import annotations

import struct

import numpy as np

_STRUCT_CODES = {np.uint64: "Q", np.int64: "q", np.int32: "i", np.uint32: "I", np.float32: "f"}


class StructLayout:
    """A packed C struct: (field, C++ type, NumPy type) in member order, no padding."""

    def __init__(self, name: str, fields: tuple[tuple[str, str, type], ...]):
        self.name = name
        self.fields = fields
        self.dtype = np.dtype([(f, t) for f, _, t in fields], align=True)
        offset = 0
        for field, _, np_type in fields:
            if self.dtype.fields[field][1] != offset:
                raise AssertionError(f"{name}.{field} would be padded; reorder the fields")
            offset += np.dtype(np_type).itemsize
        if offset != self.dtype.itemsize:
            raise AssertionError(f"{name} has trailing padding; reorder the fields")
        # The same bytes by `struct` (a microsecond, where setting NumPy record fields one by
        # one costs about one each): the whole block in field order, and the offset of each field.
        self.packer = struct.Struct("<" + "".join(_STRUCT_CODES[t] for _, _, t in fields))
        self.offsets = {field: self.dtype.fields[field][1] for field, _, _ in fields}
        self.void = np.dtype((np.void, self.dtype.itemsize))

    def pack(self, **values) -> bytearray:
        """A block with these fields set (the rest zero), as bytes a launch passes by value."""
        return bytearray(self.packer.pack(*(values.get(field, 0) for field, _, _ in self.fields)))

    def as_argument(self, block: bytearray) -> np.ndarray:
        """A packed block as the size-1 opaque record a launch copies by value."""
        return np.frombuffer(block, dtype=self.void)

    def cpp(self) -> str:
        """The C++ definition plus the layout checks.

        NVRTC has no constant-expression offsetof, so the checks prove the layout another
        way: each member has the size Python gives it and the struct is exactly the sum
        of its members. A standard-layout struct without padding places its members in
        declaration order at the running sum of sizes, which is what __init__ holds the
        NumPy layout to.
        """
        members = "\n".join(f"  {ctype} {field};" for field, ctype, _ in self.fields)
        checks = "\n".join(
            f"static_assert(sizeof({ctype}) == {np.dtype(np_type).itemsize}, "
            f'"cutlass_sparse.arguments: field {field} has a different size in C++");'
            for field, ctype, np_type in self.fields)
        return (
            f"struct {self.name} {{\n{members}\n}};\n{checks}\n"
            f"static_assert(sizeof({self.name}) == {self.dtype.itemsize}, "
            f'"cutlass_sparse.arguments: C++ struct is padded or sized differently from the Python layout");\n'
            f"static_assert(cuda::std::is_standard_layout<{self.name}>::value, "
            f'"cutlass_sparse.arguments: struct must be standard-layout");\n')

    def new_block(self) -> np.ndarray:
        """A zeroed argument block (a size-1 structured array)."""
        return np.zeros(1, dtype=self.dtype)


# The sm80 family's GEMM entry (emit_sm80.py): CUTLASS's GemmSparseUniversal arguments.
SM80_GEMM = StructLayout("CutlassSparseArguments", (
    ("a", "void const *", np.uint64),          # compressed values [M_pad, K_pad/2]
    ("e", "void const *", np.uint64),          # reordered metadata
    ("b", "void const *", np.uint64),
    ("c", "void const *", np.uint64),
    ("d", "void *", np.uint64),
    ("semaphore", "int *", np.uint64),         # serial split-K: one lock per output tile, zeroed
    ("lda", "long long", np.int64),            # leading dimensions, in elements
    ("lde", "long long", np.int64),
    ("ldb", "long long", np.int64),
    ("ldc", "long long", np.int64),
    ("ldd", "long long", np.int64),
    ("batch_stride_a", "long long", np.int64),  # batched: in CUTLASS's units (A and E: stored x 2)
    ("batch_stride_e", "long long", np.int64),
    ("batch_stride_b", "long long", np.int64),
    ("batch_stride_c", "long long", np.int64),
    ("batch_stride_d", "long long", np.int64),  # also parallel split-K: between K slices' partials
    ("m", "int", np.int32),                    # problem as the kernel sees it
    ("n", "int", np.int32),
    ("k", "int", np.int32),
    ("mode", "int", np.int32),                 # cutlass::gemm::GemmUniversalMode
    ("batch_count", "int", np.int32),          # K slices (kGemm, kGemmSplitKParallel) or batch size
    ("slice_k", "int", np.int32),              # K per slice, whole tiles; 0: one slice
    ("grid_k", "int", np.int32),               # K slices that slice_k yields
    ("alpha", "float", np.float32),
    ("beta", "float", np.float32),
    ("activation_arg", "float", np.float32),   # leaky_relu's negative slope
))

# The parallel split-K reduction entry (emit_reduction.py).
REDUCE_SPLIT_K = StructLayout("CutlassSparseReduceArguments", (
    ("workspace", "void const *", np.uint64),  # fp32 partials [slices, M, ld_workspace]
    ("source", "void const *", np.uint64),     # C
    ("destination", "void *", np.uint64),      # D
    ("slice_stride", "long long", np.int64),   # elements between slices
    ("ld_workspace", "long long", np.int64),
    ("ld_source", "long long", np.int64),
    ("ld_destination", "long long", np.int64),
    ("m", "int", np.int32),
    ("n", "int", np.int32),
    ("slices", "int", np.int32),
    ("alpha", "float", np.float32),
    ("beta", "float", np.float32),
    ("activation_arg", "float", np.float32),
))

# The staging copy's entries (emit.line_copy): `lines` runs of `width` bytes.
LINE_COPY = StructLayout("CutlassSparseLineCopyArguments", (
    ("destination", "void *", np.uint64),
    ("source", "void const *", np.uint64),
    ("destination_pitch", "long long", np.int64),   # bytes between lines
    ("source_pitch", "long long", np.int64),
    ("width", "long long", np.int64),               # bytes of each line
    ("lines", "long long", np.int64),
))
