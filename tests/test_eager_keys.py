"""The eager plan cache's keys, without a GPU: calls that need different kernels or launch
parameters never share a plan; a new N finds its class's plan only when its operands
are laid out, aligned and ranged like that call's, and the Problem made for it is the
one the full path would build."""
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest

from cutlass_sparse.api import eager, eager_keys, operands
from cutlass_sparse.describe import selection
from cutlass_sparse.describe.problem import Epilogue, Operand, Problem
from cutlass_sparse.plan import plans

M, K = 256, 512
F16 = np.dtype(np.float16)
OPTIONS = (1.0, 0.0, "identity", 0.01, None, None, None, None, None)
HEAD = ((M, K), F16, "sm90", 0)


def attrs(shape, strides, align=0, dtype=F16):
    return (shape, strides, dtype, align, 0)


def x_row(n, ld=None):
    return attrs((K, n), ((ld or n) * 2, 2))


def x_col(n):
    return attrs((K, n), (2, K * 2))


def out_row(n, ld=None, align=0):
    return attrs((M, n), ((ld or n) * 2, 2), align)


def fast_key(x, out=None, options=OPTIONS, bias=None):
    return (*HEAD, *x, options, out, bias)


def test_same_call_same_key_and_any_change_a_new_one():
    base = fast_key(x_row(64), out_row(64))
    assert base == fast_key(x_row(64), out_row(64))
    others = [fast_key(x_row(64, ld=72), out_row(64)), fast_key(x_col(64), out_row(64)),
              fast_key(x_row(64), out_row(64, align=8)), fast_key(x_row(64)),
              fast_key(x_row(64), out_row(64), OPTIONS[:2] + ("relu",) + OPTIONS[3:]),
              fast_key(attrs((K, 64), (128, 2), dtype=np.dtype("V2")), out_row(64))]
    assert len({base, *others}) == 1 + len(others)


@pytest.mark.parametrize("x", [x_row, x_col])
def test_class_groups_n_by_range_and_alignment(x):
    klass = lambda n: eager_keys.class_key(fast_key(x(n), out_row(n)))   # noqa: E731
    assert klass(17) == klass(23) != klass(24)      # both unaligned in (16, 32]; 24 is aligned
    assert klass(24) == klass(32) != klass(40)      # (32, 64] is another range
    assert klass(2) == klass(7) != klass(1)         # N = 1 reads as a column: its own class
    assert klass(9) == klass(15) != klass(7)        # (8, 16] is another range (8-wide tiles up to 8)
    assert klass(8) != klass(16) and klass(4) != klass(8)   # 8 is aligned, 4 is not


def test_no_class_for_padded_strided_or_biased_calls():
    assert eager_keys.class_key(fast_key(x_row(20, ld=24), out_row(20))) is None     # padded x
    assert eager_keys.class_key(fast_key(x_row(20), out_row(20, ld=24))) is None     # padded out
    assert eager_keys.class_key(fast_key(x_row(20), attrs((M, 20), (4, M * 4)))) is None   # strided out
    col_out = eager_keys.class_key(fast_key(x_col(20), attrs((M, 20), (2, M * 2))))       # cs.linear's out
    assert col_out is not None and col_out != eager_keys.class_key(fast_key(x_col(20), out_row(20)))
    assert eager_keys.class_key(fast_key(x_row(20), attrs((M, 21), (42, 2)))) is None  # out of another N
    assert eager_keys.class_key(fast_key(x_row(20), out_row(20), bias=attrs((M,), (2,)))) is None


def problem_for(x, out, n):
    """The Problem gemm_call builds, from NumPy stand-ins with the operands' strides (their
    addresses are 16-byte aligned, as the keys below say)."""
    layout, ld = operands.matrix_layout(x)
    out_operand = None
    if out is not None:
        out_operand = Operand(*operands.output_layout(out, "sm90", n), 16)
    return Problem("sm90", M, n, K, "f16", "f16", Operand(layout, ld, 16), out_operand, None, Epilogue(),
                   None, None, 0, "sm_90", 132)


@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("out_kind", ["row", "col", None])
@pytest.mark.parametrize("n0, n", [(16, 9), (24, 32), (33, 63), (100, 128), (1, 1), (4096, 3000)])
def test_problem_for_a_new_n_is_the_full_paths(layout, out_kind, n0, n):
    def operands_of(n):
        x = np.zeros((K, n), F16) if layout == "row" else np.zeros((n, K), F16).T
        out = {"row": lambda: np.zeros((M, n), F16), "col": lambda: np.zeros((n, M), F16).T, None: lambda: None}
        return x, out[out_kind]()

    seen = problem_for(*operands_of(n0), n0)
    plan = SimpleNamespace(direct=True, asked=(None, None))   # a stand-in: the Problem is what is checked
    with mock.patch.object(plans, "get", lambda problem, config=None: plan):
        x, out = operands_of(n)
        key = fast_key(attrs(x.shape, x.strides), None if out is None else attrs(out.shape, out.strides))
        derived = eager._for_n(eager.Entry(plan, seen), key)
    assert derived.problem == problem_for(x, out, n) and derived.out_shape == (M, n)
    assert derived.plan is plan and derived.direct == (not derived.problem.epilogue.reads_c)


def test_one_kernel_per_range_and_never_across_what_changes_it():
    def key(n, **changes):
        fields = dict(m=M, k=K, element="f16", element_out="f16", layout_b="row", activation="identity",
                      out_layout=None)
        fields.update(changes)
        problem = Problem.contiguous("sm90", fields.pop("m"), n, fields.pop("k"), **fields)
        return plans.range_key(problem, None, None)

    assert key(17) == key(32) != key(33)
    assert key(2) == key(8) != key(9) == key(16) and key(1, out_layout="row") == key(8, out_layout="row")
    assert key(1) != key(2)     # one column: D the library allocates is column-major (Problem.layout_d)
    assert key(64, out_layout="row") == key(64)     # D the library allocates is row-major too
    for change in (dict(m=M * 2), dict(k=K * 2), dict(element="bf16", element_out="bf16"),
                   dict(element_out="f32"), dict(layout_b="col"), dict(activation="relu"), dict(out_layout="col")):
        assert key(64, **change) != key(64)


def test_selection_is_constant_over_each_range():
    for m, k in ((4096, 4096), (11008, 4096), (4096, 14336), (1000, 512)):
        for low, high in ((1, 8), (9, 16), (17, 32), (33, 64), (65, 128), (129, 256), (257, 512), (2049, 4096)):
            choices = {selection.choose_sm90(m, n, k, 132) for n in range(low, high + 1, 7)}
            assert choices == {selection.choose_sm90(m, high, k, 132)}


class CudaLike:
    """A CPU torch tensor that answers as a CUDA tensor on device 0 at a 512-aligned address
    (plus `offset` bytes): what the key functions read of a tensor."""

    def __init__(self, tensor, offset=0):
        self.t, self.offset = tensor, offset
        self.shape, self.dtype, self.is_cuda = tensor.shape, tensor.dtype, True

    def stride(self):
        return self.t.stride()

    def dim(self):
        return self.t.dim()

    def data_ptr(self):
        return 0x7F0000000000 + self.offset

    def get_device(self):
        return 0

    @property
    def T(self):
        return CudaLike(self.t.T, self.offset)


@pytest.fixture
def torch_sw():
    torch = pytest.importorskip("torch")

    class Values:   # stands in for cupy.ndarray in the weight's part of the key
        class data:
            device_id = 0

    from cutlass_sparse.formats.matrices import SparseMatrix

    with mock.patch.object(eager_keys, "_ndarray", Values):
        yield torch, SparseMatrix((M, K), F16, Values(), None, "sm90")


@pytest.mark.parametrize("n", [1, 7, 8, 64, 100])
def test_torch_keys_equal_the_full_paths(torch_sw, n):
    """A torch call's key, made from the tensors without views, is the key cs.matmul makes
    on CuPy views of what the full path ends up with: the out torch.empty gives (or none,
    where the library's D is padded), and for cs.linear x.T and the D it allocates."""
    torch, sw = torch_sw
    x = CudaLike(torch.zeros(K, n, dtype=torch.float16))
    allocated = CudaLike(torch.zeros(M, n, dtype=torch.float16))
    if n % 8:   # the library's own D, padded to whole 16-byte rows, as a CuPy call without out keys it
        assert eager_keys.torch_key(sw, x, None, OPTIONS) == fast_key(attrs((K, n), (n * 2, 2)), None)
    else:       # the [M, N] torch.empty gives
        assert eager_keys.torch_key(sw, x, None, OPTIONS) == fast_key(attrs((K, n), (n * 2, 2)),
                                                                       attrs((M, n), (n * 2, 2)))
    assert eager_keys.torch_key(sw, x, allocated, OPTIONS) == fast_key(attrs((K, n), (n * 2, 2)),
                                                                       attrs((M, n), (n * 2, 2)))
    assert eager_keys.torch_key(sw, x, None, OPTIONS[:4] + ("f32",) + OPTIONS[5:]) is None   # allocated first
    tokens = CudaLike(torch.zeros(n, K, dtype=torch.float16), offset=2)
    key, col = eager_keys.linear_key(tokens, sw, OPTIONS)
    assert col == (n % 8 != 0)
    d = CudaLike(torch.zeros(n, M, dtype=torch.float16).T if col else torch.zeros(M, n, dtype=torch.float16))
    assert key == eager_keys.torch_key(sw, tokens.T, d, OPTIONS)
    assert key[4:9] == ((K, n), (2, K * 2), F16, 2, 0)


def test_int8_keys_name_the_int32_output(torch_sw):
    torch, sw = torch_sw
    x = CudaLike(torch.zeros(K, 16, dtype=torch.int8))
    assert eager_keys.torch_key(sw, x, None, OPTIONS)[eager_keys._OUT] == ((M, 16), (64, 4), np.dtype(np.int32), 0, 0)


@pytest.mark.parametrize("x", [x_row, x_col])
@pytest.mark.parametrize("out", [out_row, lambda n: attrs((M, n), (2, M * 2)), lambda n: None])
def test_ahead_built_plans_are_kept_under_the_keys_their_calls_have(x, out):
    """A range's other N are remembered under the exact key a call with that N makes."""
    for n0, n in ((17, 23), (24, 32), (100, 65), (3, 16)):
        assert eager_keys.key_for_n(fast_key(x(n0), out(n0)), n) == fast_key(x(n), out(n))


def test_a_new_n_of_a_call_that_named_a_kernel_runs_that_kernel():
    """The caller's config (kernel, swizzle, raster order) holds at every N of its class."""
    named = selection.config_for_shape(M, 64, K, "f16", "f16", "row", 132, "sm90")
    plan = SimpleNamespace(direct=True, asked=(named, None))
    seen = problem_for(np.zeros((K, 64), F16), None, 64)
    asked = []
    with mock.patch.object(plans, "get", lambda problem, config=None: asked.append(config) or plan):
        eager._for_n(eager.Entry(plan, seen), fast_key(x_row(72)))
    assert asked == [named]


def test_a_range_of_two_kernels_builds_ahead_for_each_on_its_own_first_call(monkeypatch):
    """A range whose N run two kernels (the tail twin's and the persistent tile's) builds its
    N ahead per kernel: the class's first call builds its own kernel's N, and the other's
    too only if that kernel's pointers are mapped (it has run); else the first call that
    runs it builds them (lookup). Neither is built twice."""
    n0 = 200     # in (128, 256]: N above 224 run kernel "twin", the rest kernel "persistent"

    def kernel_of(n):
        return "twin" if n > 224 else "persistent"

    built = []

    class Plan:
        family, direct, asked = "sm90", True, (None, None)

        def __init__(self, problem, mapped=True):
            self.problem, self.compiled = problem, SimpleNamespace(key=kernel_of(problem.n))
            self.pointers_mapped = mapped

        def build_ahead(self, problems):
            built.append((self.compiled.key, sorted(p.n for p in problems)))
            return {p.n: Plan(p) for p in problems}

    mapped = {"twin": False}   # the persistent kernel has run here; the twin has not
    monkeypatch.setattr(plans, "sharing", lambda plan, qs: [q for q in qs if kernel_of(q.n) == plan.compiled.key])
    monkeypatch.setattr(plans, "at_hand", lambda problem, config=None: Plan(problem, mapped.get(kernel_of(problem.n), True)))
    monkeypatch.setattr(plans, "get", lambda problem, config=None: Plan(problem))
    monkeypatch.setattr(eager, "_capturing", lambda: False)
    eager.clear()
    try:
        key = fast_key(x_row(n0), out_row(n0))
        x = np.zeros((K, n0), F16)
        eager._keep(key, eager.Entry(Plan(problem_for(x, np.zeros((M, n0), F16), n0)), problem_for(x, None, n0)),
                    eager_keys.class_key(key))
        eager._build_ahead(key, eager._entries[key], eager_keys.class_key(key))
        persistent_n = [v for v in range(136, 225, 8) if v != n0]
        twin_n = list(range(232, 257, 8))
        assert built == [("persistent", persistent_n)]   # the twin has not run: not built yet
        assert eager.lookup(fast_key(x_row(240), out_row(240))).plan.compiled.key == "twin"   # built here
        assert built[1] == ("twin", [v for v in twin_n if v != 240])
        eager.lookup(fast_key(x_row(248), out_row(248)))   # remembered: no lookup of its class, no build
        eager.lookup(fast_key(x_row(136), out_row(136)))
        assert len(built) == 2
        assert {n: eager._entries[fast_key(x_row(n), out_row(n))].plan.compiled.key
                for n in persistent_n + twin_n} == {n: kernel_of(n) for n in persistent_n + twin_n}
    finally:
        eager.clear()


def test_two_threads_at_a_class_first_call_build_its_range_once(monkeypatch):
    """Two threads making a class's first call at once: one builds the range's N ahead, the
    other finds it claimed (review L4: both built it, twice the setups for nothing)."""
    import threading

    n0, calls, inside = 200, [], threading.Barrier(2, timeout=5)

    class Plan:
        family, direct, asked = "sm90", True, (None, None)
        pointers_mapped = True

        def __init__(self, problem):
            self.problem, self.compiled = problem, SimpleNamespace(key="one kernel")

        def build_ahead(self, problems):
            calls.append(len(problems))
            return {}

    real_claim = eager._claim

    def claim_together(klass, plan):   # both threads reach the claim before either takes it
        try:
            inside.wait()
        except threading.BrokenBarrierError:
            pass
        return real_claim(klass, plan)

    monkeypatch.setattr(plans, "sharing", lambda plan, qs: list(qs))
    monkeypatch.setattr(eager, "_capturing", lambda: False)
    monkeypatch.setattr(eager, "_claim", claim_together)
    eager.clear()
    try:
        key = fast_key(x_row(n0), out_row(n0))
        x = np.zeros((K, n0), F16)
        entry = eager.Entry(Plan(problem_for(x, np.zeros((M, n0), F16), n0)), problem_for(x, None, n0))
        threads = [threading.Thread(target=eager._build_ahead, args=(key, entry, eager_keys.class_key(key)))
                   for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(calls) == 1
    finally:
        eager.clear()
