"""The kernel argument block: one POD struct, laid out here and checked by the compiler.

CUTLASS 2.x kernel Params hold precomputed iterator state whose layout we cannot
see without a host compiler. So the emitted entry takes this small struct by value
and builds the CUTLASS Params inside the kernel (their constructors are
CUTLASS_HOST_DEVICE). Python owns this struct's layout: the emitter writes it into
the source together with a static_assert for its size and every field offset, so a
layout that drifts from what NVRTC computes fails to compile instead of launching
with garbage.
"""
from __future__ import annotations

import numpy as np

# (field, C++ type, NumPy type); order is the struct's member order.
FIELDS = (
    ("a", "void const *", np.uint64),          # compressed values [M_pad, K_pad/2]
    ("e", "void const *", np.uint64),          # reordered metadata
    ("b", "void const *", np.uint64),
    ("c", "void const *", np.uint64),
    ("d", "void *", np.uint64),
    ("semaphore", "int *", np.uint64),         # serial split-K locks (unused for now)
    ("lda", "long long", np.int64),            # leading dimensions, in elements
    ("lde", "long long", np.int64),
    ("ldb", "long long", np.int64),
    ("ldc", "long long", np.int64),
    ("ldd", "long long", np.int64),
    ("m", "int", np.int32),                    # problem as the kernel sees it
    ("n", "int", np.int32),
    ("k", "int", np.int32),
    ("grid_m", "int", np.int32),               # tiled shape (tiles along M, N, K slices)
    ("grid_n", "int", np.int32),
    ("grid_k", "int", np.int32),
    ("alpha", "float", np.float32),
    ("beta", "float", np.float32),
)

DTYPE = np.dtype([(name, np_type) for name, _, np_type in FIELDS], align=True)

STRUCT_NAME = "CutlassSparseArguments"


def _check_packed() -> None:
    """Every field sits at the running sum of the sizes before it: no padding anywhere."""
    offset = 0
    for name, _, np_type in FIELDS:
        if DTYPE.fields[name][1] != offset:
            raise AssertionError(f"argument field {name} would be padded; reorder FIELDS")
        offset += np.dtype(np_type).itemsize
    if offset != DTYPE.itemsize:
        raise AssertionError("argument block has trailing padding; reorder FIELDS")


_check_packed()


def cpp_struct() -> str:
    """The C++ definition of the struct plus the layout checks.

    NVRTC has no constant-expression offsetof, so the checks prove the layout another
    way: each member has the size Python gives it, and the struct is exactly the sum
    of its members. A standard-layout struct with no padding lays members out in
    declaration order at the running sum of sizes, which is what _check_packed holds
    Python to. The launcher also compares the kernel's parameter size read from the
    cubin (cubin.kernel_param_bytes).
    """
    members = "\n".join(f"  {ctype} {name};" for name, ctype, _ in FIELDS)
    checks = "\n".join(
        f"static_assert(sizeof({ctype}) == {np.dtype(np_type).itemsize}, "
        f'"cutlass_sparse.arguments: field {name} has a different size in C++");'
        for name, ctype, np_type in FIELDS
    )
    return (
        f"struct {STRUCT_NAME} {{\n{members}\n}};\n{checks}\n"
        f"static_assert(sizeof({STRUCT_NAME}) == {DTYPE.itemsize}, "
        f'"cutlass_sparse.arguments: C++ struct is padded or sized differently from the Python layout");\n'
        f"static_assert(cuda::std::is_standard_layout<{STRUCT_NAME}>::value, "
        f'"cutlass_sparse.arguments: struct must be standard-layout");\n'
    )


def new_block() -> np.ndarray:
    """A zeroed argument block (a size-1 structured array)."""
    return np.zeros(1, dtype=DTYPE)
