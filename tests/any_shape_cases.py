"""The random sweep of valid problems: N from 1 to 4096 (odd ones too), both x layouts,
padded leading dimensions, offset views, user out views. Each case must run on the
default path and match dense. Shared by tests/test_gpu_any_shape.py (runs them) and
tests/gpu_cases.py (compiles their kernels ahead, on a machine without a GPU)."""
import random
from dataclasses import dataclass

N_VALUES = [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 127, 128, 255, 256, 511, 1000, 4095, 4096]
X_STORES = ["contiguous", "padded", "offset"]
OUT_STORES = ["none", "contiguous", "padded", "offset", "col"]
COUNT = 60   # cases per family and seed


@dataclass(frozen=True)
class Case:
    family: str
    m: int
    n: int
    k: int
    dtype: str
    layout: str          # x: "row" | "col"
    x_store: str         # one of X_STORES
    out_store: str       # one of OUT_STORES

    @property
    def id(self) -> str:
        return (f"{self.family}-{self.m}x{self.n}x{self.k}-{self.dtype}-{self.layout}-x_{self.x_store}"
                f"-out_{self.out_store}")


def cases(family: str, count: int = COUNT, seed: int = 11) -> list[Case]:
    rng = random.Random(f"{family}-{seed}")
    out = []
    for _ in range(count):
        n = rng.choice(N_VALUES)
        m = rng.choice([64, 200, 1000] if n < 1000 else [64, 200])
        k = rng.choice([64, 256, 1024] + ([72, 100] if family == "sm80" else []))
        out.append(Case(family, m, n, k, rng.choice(["f16", "bf16"]), rng.choice(["row", "col"]),
                        rng.choice(X_STORES), rng.choice(OUT_STORES)))
    return out


# -- arrays (on the GPU) -----------------------------------------------------------

def stored(array, store: str, layout: str):
    """`array` [R, C] copied into storage of the given kind: contiguous in `layout`, a
    view of a wider buffer (padded leading dimension) or a view one element in (offset)."""
    import cupy

    rows, cols = array.shape
    extra = {"contiguous": 0, "padded": 3, "offset": 1}[store]
    start = 1 if store == "offset" else 0
    if layout == "row":
        view = cupy.empty((rows, cols + extra), dtype=array.dtype)[:, start:start + cols]
    else:
        view = cupy.empty((cols, rows + extra), dtype=array.dtype)[:, start:start + rows].T
    view[...] = array
    return view


def out_array(case: Case, np_dtype):
    """The out= a case passes (None for "none")."""
    import cupy

    if case.out_store == "none":
        return None
    if case.out_store == "col":
        return cupy.empty((case.m, case.n), dtype=np_dtype, order="F")
    store = {"contiguous": "contiguous", "padded": "padded", "offset": "offset"}[case.out_store]
    return stored(cupy.zeros((case.m, case.n), dtype=np_dtype), store, "row")


# -- the Problem a case makes, without a GPU (for compiling ahead) -----------------

def problem_of(case: Case, sm_count: int = 132):
    """The Problem cs.matmul builds for a case, with CuPy's pool-aligned (256-byte) buffers."""
    from cutlass_sparse.describe import dtypes
    from cutlass_sparse.describe.problem import Epilogue, Operand, Problem

    item = dtypes.numpy_dtype(case.dtype).itemsize

    def operand(layout, extent, store):
        ld = extent + {"contiguous": 0, "padded": 3, "offset": 1}[store]
        return Operand(layout, ld, item if store == "offset" else 16)

    x = operand(case.layout, case.n if case.layout == "row" else case.k, case.x_store)
    if case.n == 1 and (case.layout == "col" or case.x_store == "contiguous"):
        # a single column with unit row stride reads as column-major, leading dimension K
        x = Operand("col", case.k, x.align)
    out = None if case.out_store in ("none", "col") else operand("row", case.n, case.out_store)
    if case.family == "sm90" and case.out_store == "col":
        out = Operand("col", case.m, 16)   # written in place: sm90 writes D column-major too
    elif case.out_store == "col":
        out = None                         # sm80: computed row-major, then copied in
    elif case.family == "sm90" and case.n == 1 and case.m > 1 and case.out_store in ("contiguous", "offset"):
        out = Operand("col", case.m, out.align)   # an [M, 1] column reads as column-major
    return Problem(case.family, case.m, case.n, case.k, case.dtype, case.dtype, x, out, None, Epilogue(),
                   None, None, 0, "sm_90", sm_count)
