"""top_k1: stable top-k against the loop oracle, spec examples, dtypes, axes, NaN/-0.0, ties,
long rows, autograd, opcheck, compile, export."""
import numpy as np
import pytest
import torch

import torch_dml_ops as tdo
from conftest import backend_param
from helpers import DATA_DTYPES, make_data
from reference import TOP_K1_EXAMPLES, to_bits, top_k1_ref

topk_op = torch.ops.torch_dml_ops.top_k1
DIRS = ["decreasing", "increasing"]


def check(x, k, axis=-1, direction="decreasing", index_dtype=torch.int64):
    res = tdo.top_k1(x, k, axis, direction, index_dtype)
    want_bits, want_idx = top_k1_ref(x, k, axis % x.dim(), direction == "decreasing")
    assert res.values.dtype == x.dtype and res.indices.dtype == index_dtype
    np.testing.assert_array_equal(to_bits(res.values), want_bits)
    np.testing.assert_array_equal(res.indices.to(torch.int64).numpy(), want_idx)
    return res


@pytest.fixture(params=["direct", "chunked", "short_tie_prefix", backend_param("native")])
def portable_path(request, backend, monkeypatch):
    """The portable strategies (forced: the C++ kernel is the CPU default where built): one
    torch.topk, or selection through (recursive, strided) chunk maxima, and k = 1 through strided
    chunk maxima; boundary ties found in a row prefix, or (short prefix) through the whole-row
    count.  And the C++ CPU kernel (tests/test_backends.py covers it further)."""
    from torch_dml_ops.portable import top_k1 as portable_topk
    if request.param == "native":
        backend("native")
        return request.param
    backend("torch")
    if request.param == "chunked":
        monkeypatch.setattr(portable_topk, "CHUNKED_MIN_ROW", 1)
        monkeypatch.setattr(portable_topk, "TOP1_MIN_ROW", 2)
    if request.param == "short_tie_prefix":
        monkeypatch.setattr(portable_topk, "TIE_PREFIX", 3)
        monkeypatch.setattr(portable_topk, "TIE_PREFIX_PER_K", 1)
    return request.param


@pytest.mark.parametrize("direction", DIRS)
def test_top_k1_uint64_above_2_63_against_the_oracle(direction, portable_path):
    """uint64 values at and above 2**63 order above every smaller one, ties in index order,
    against the loop oracle (which compared such values as int64 before: they sorted below
    zero)."""
    g = torch.Generator().manual_seed(5)
    big = torch.randint(0, 4, (3, 300), generator=g) * (2**61 + 7)      # 0, 2**61+7, ... 3*(..)
    x = (big + torch.randint(0, 3, (3, 300), generator=g)).view(torch.int64)
    x = torch.where(torch.rand(3, 300, generator=g) < 0.5, x, x | -(1 << 63)).view(torch.uint64)
    for k in (1, 5, 300):
        check(x, k, 1, direction)
    bits, idx = top_k1_ref(torch.tensor([1, -1, 2], dtype=torch.int64).view(torch.uint64), 3, 0)
    assert idx.tolist() == [1, 2, 0]          # 2**64 - 1 first


@pytest.mark.parametrize("ex", TOP_K1_EXAMPLES, ids=lambda e: e["name"])
def test_top_k1_spec_examples(ex):
    x = torch.tensor(ex["input"], dtype=torch.float32)
    with tdo.feature_level("2_1"):
        res = tdo.top_k1(x, ex["k"], ex["axis"], ex["direction"], index_dtype=torch.uint32)
    assert torch.equal(res.values, torch.tensor(ex["values"], dtype=torch.float32))
    assert torch.equal(res.indices, torch.tensor(ex["indices"], dtype=torch.uint32))
    d = tdo.AxisDirection.DML_AXIS_DIRECTION_DECREASING if ex["direction"] == "decreasing" \
        else tdo.AxisDirection.DML_AXIS_DIRECTION_INCREASING
    res2 = torch.ops.torch_dml_ops.top_k1(x, ex["k"], ex["axis"], ex["direction"], torch.uint32)
    assert torch.equal(res2[1], res.indices)
    assert torch.equal(tdo.top_k1(x, ex["k"], ex["axis"], d).indices, res.indices.long())


def test_top_k1_result_is_named_tuple():
    res = tdo.top_k1(torch.tensor([1.0, 3.0, 2.0]), 2)
    values, indices = res
    assert res.values is values and res.indices is indices and indices.tolist() == [1, 2]


@pytest.mark.usefixtures("portable_path")
@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=str)
def test_top_k1_dtypes(dtype, direction):
    g = torch.Generator().manual_seed(1)
    x = make_data((3, 40), dtype, g)
    if not dtype.is_floating_point and dtype != torch.bool:
        x = torch.randint(0, 7, (3, 40), generator=g).to(dtype)      # many ties
    for k in (1, 5, 40):
        check(x, k, -1, direction)


@pytest.mark.usefixtures("portable_path")
@pytest.mark.parametrize("direction", DIRS)
def test_top_k1_nan_inf_signed_zero(direction):
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([0.0, nan, -0.0, inf, -inf, 1.0, nan, 0.0, -1.0, -0.0] * 4)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        for k in (1, 2, 3, 5, 9, 20, 40):
            check(x.to(dtype), k, 0, direction)


@pytest.mark.usefixtures("portable_path")
@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("r", range(1, 9))
def test_top_k1_every_axis_ranks_1_to_8(r, direction):
    g = torch.Generator().manual_seed(r)
    shape = tuple(int(s) for s in torch.randint(1, 4, (r,), generator=g))
    x = (torch.randint(0, 3, shape, generator=g)).float()          # plenty of ties
    for axis in range(-r, r):
        n = shape[axis]
        for k in sorted({1, n, (n + 1) // 2}):
            check(x, k, axis, direction)


@pytest.mark.usefixtures("portable_path")
@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32, torch.uint32], ids=str)
def test_top_k1_many_ties_at_the_boundary(direction, index_dtype):
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, 16, (16, 300), generator=g, dtype=torch.int32)
    for k in (1, 8, 37, 299, 300):
        check(x, k, 1, direction, index_dtype)
    check(torch.zeros(2, 100), 10, -1, direction)                   # all equal


@pytest.mark.usefixtures("portable_path")
def test_top_k1_long_rows():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(1, 5000, generator=g).round(decimals=1)         # ties everywhere
    for k in (1, 10, 100):
        for d in DIRS:
            check(x, k, -1, d)
    check(torch.randn(2, 3001, generator=g), 7, -1)


@pytest.mark.parametrize("forced", [False, True])
@pytest.mark.parametrize("direction", DIRS)
def test_top_k1_strided_chunks(direction, forced, backend, monkeypatch):
    """Shapes the cost model sends through strided chunk maxima (and k = 1 through the chunked
    first-best), or every level split (forced): ties at the boundary, in several chunks and in
    the tail, NaN, -0.0 / +0.0, integer types torch.topk refuses, non-contiguous rows."""
    from torch_dml_ops.portable import top_k1 as portable_topk
    backend("torch")
    if forced:
        monkeypatch.setattr(portable_topk, "CHUNKED_MIN_ROW", 1)
        monkeypatch.setattr(portable_topk, "TOP1_MIN_ROW", 2)
    g = torch.Generator().manual_seed(7)
    nan = float("nan")
    for n in (1024, 1031):                                        # no tail / a tail
        ties = torch.randint(0, 6, (24, n), generator=g)
        f = torch.randn(24, n, generator=g)
        f[::3, 5::97] = nan                                      # some rows with NaN
        f[1::4, :: 13] = 0.0
        f[1::4, 7:: 13] = -0.0
        f[2::5] = f[2::5].round()                                # ties across chunks
        f[3, -3:] = f[3].max()                                   # the best value in the tail
        for k in (1, 2, 8, 37):
            check(f, k, -1, direction)
            check(ties.float(), k, -1, direction)
        for dtype in (torch.int32, torch.uint8, torch.uint16, torch.uint32, torch.int64):
            check(ties.to(dtype), 8, -1, direction)
            check(ties.to(dtype), 1, -1, direction)
        check(f.t().contiguous().t(), 8, -1, direction)          # strided rows
        check(f.t(), 3, 0, direction)
    x = torch.randint(0, 3, (4, 600), generator=g).to(torch.float16)
    for k in (1, 300, 599, 600):                                  # k up to the row length
        check(x, k, -1, direction)
    check(torch.full((3, 2048), nan), 5, -1, direction)          # all NaN
    check(torch.zeros(3, 2048).index_fill_(1, torch.arange(1, 2048, 2), -0.0), 9, -1, direction)


def test_top_k1_is_stable_where_torch_topk_is_not_promised():
    """torch.topk does not promise an order among ties (pytorch issues 88227, 52745)."""
    x = torch.zeros(1000)
    x[::7] = 1.0
    res = tdo.top_k1(x, 50)
    assert res.indices.tolist() == list(range(0, 350, 7))
    inc = tdo.top_k1(x, 50, direction="increasing")
    assert inc.indices.tolist() == [i for i in range(1000) if i % 7][:50]


@pytest.mark.usefixtures("portable_path")
@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded"])
def test_top_k1_non_contiguous(layout):
    base = torch.randint(0, 5, (6, 8, 5)).float()
    x = {"transposed": base.transpose(0, 2), "sliced": base[::2, 1::3],
         "expanded": torch.randint(0, 5, (1, 8, 1)).float().expand(6, 8, 5)}[layout]
    for axis in range(3):
        check(x, min(3, x.shape[axis]), axis)


def test_top_k1_zero_size_other_dims():
    res = tdo.top_k1(torch.randn(0, 5), 2)
    assert res.values.shape == (0, 2) and res.indices.shape == (0, 2)


@pytest.mark.parametrize("args,exc,match", [
    ((torch.randn(3, 4), 5, -1), ValueError, r"K must be in \[1, 4\].*got 5"),
    ((torch.randn(3, 4), 0, -1), ValueError, r"K must be in \[1, 4\]"),
    ((torch.randn(3, 4), 1, 2), IndexError, r"Axis 2 is out of range"),
    ((torch.randn(3, 4), 1, -3), IndexError, r"Axis -3 is out of range"),
    ((torch.tensor(1.0), 1, 0), ValueError, "at least 1 dimension"),
])
def test_top_k1_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        tdo.top_k1(*args)


def test_top_k1_bad_direction_and_index_dtype():
    with pytest.raises(ValueError, match="direction"):
        tdo.top_k1(torch.randn(4), 1, direction="up")
    with pytest.raises(TypeError, match="index_dtype"):
        tdo.top_k1(torch.randn(4), 1, index_dtype=torch.int16)


# ------------------------------------------------------------------ autograd

@pytest.mark.parametrize("axis,direction", [(-1, "decreasing"), (0, "increasing"), (1, "decreasing")])
def test_top_k1_gradcheck(axis, direction):
    x = torch.randperm(60, dtype=torch.float64).reshape(3, 4, 5).div(7).requires_grad_()   # distinct
    fn = lambda t: tdo.top_k1(t, 2, axis, direction).values
    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))


# ------------------------------------------------------------------ opcheck, compile, export

@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("sample", range(4))
def test_top_k1_opcheck(sample, requires_grad):
    x = torch.randperm(60).reshape(3, 4, 5)
    samples = [
        (x.float(), 2, -1, "decreasing", torch.int64),
        (x.double(), 3, 0, "increasing", torch.uint32),
        (x.to(torch.uint16), 4, 1, "decreasing", torch.int32),
        (x.float() % 3, 5, 2, "increasing", torch.int64),
    ]
    inp, *rest = samples[sample]
    if requires_grad:
        if not inp.dtype.is_floating_point:
            pytest.skip("integer data has no gradient")
        inp = inp.clone().requires_grad_()
    torch.library.opcheck(topk_op, (inp, *rest, "permissive"))


@pytest.mark.compile
def test_top_k1_compile_fullgraph_no_graph_break():
    from torch._dynamo.testing import CompileCounterWithBackend
    torch._dynamo.reset()
    cnt = CompileCounterWithBackend("aot_eager")

    def fn(x):
        v, i = tdo.top_k1(x * 2, 3, axis=1)
        w = tdo.top_k1(x, 2, -1, tdo.AxisDirection.DML_AXIS_DIRECTION_INCREASING).values
        return v.sum() + w.sum(), i

    cfn = torch.compile(fn, backend=cnt, fullgraph=True, dynamic=True)
    for n in (5, 7, 9):
        x = torch.randn(n, 6, 11).round().requires_grad_()
        (gv, gi), (wv, wi) = cfn(x), fn(x)
        assert torch.equal(gi, wi) and torch.allclose(gv, wv)
        (ga,) = torch.autograd.grad(gv, x)
        (wa,) = torch.autograd.grad(wv, x)
        assert torch.equal(ga, wa)
    assert cnt.frame_count == 1, cnt.frame_count


@pytest.mark.compile
def test_top_k1_export():
    class M(torch.nn.Module):
        def forward(self, x):
            return tdo.top_k1(x, 4, direction="increasing")

    x = torch.randint(0, 5, (3, 10)).float()
    batch = torch.export.Dim("batch", min=2)
    ep = torch.export.export(M(), (x,), dynamic_shapes=({0: batch},))
    assert any("torch_dml_ops.top_k1" in str(n.target) for n in ep.graph.nodes)
    x2 = torch.randint(0, 5, (6, 10)).float()
    got, want = ep.module()(x2), M()(x2)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


# ------------------------------------------------------------------ property test

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402


@st.composite
def topk_problems(draw):
    r = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=r, max_size=r)))
    axis = draw(st.integers(-r, r - 1))
    k = draw(st.integers(1, shape[axis]))
    dtype = draw(st.sampled_from(DATA_DTYPES))
    direction = draw(st.sampled_from(DIRS))
    span = draw(st.sampled_from([2, 5, 1000]))
    seed = draw(st.integers(0, 2**16))
    chunked = draw(st.booleans())
    prefix = draw(st.sampled_from([256, 2]))
    return shape, axis, k, dtype, direction, span, seed, chunked, prefix


@given(topk_problems())
def test_top_k1_property_matches_oracle(problem):
    from torch_dml_ops.portable import top_k1 as portable_topk
    shape, axis, k, dtype, direction, span, seed, chunked, prefix = problem
    g = torch.Generator().manual_seed(seed)
    x = (torch.randint(0, span, shape, generator=g) - (span // 2 if dtype.is_signed else 0))
    x = x.to(dtype) if dtype != torch.bool else x.bool()
    saved = portable_topk.CHUNKED_MIN_ROW, portable_topk.TIE_PREFIX, portable_topk.TIE_PREFIX_PER_K
    portable_topk.CHUNKED_MIN_ROW = 1 if chunked else 1 << 62
    portable_topk.TIE_PREFIX, portable_topk.TIE_PREFIX_PER_K = prefix, (32 if prefix > 2 else 1)
    try:
        with tdo._backend.override("torch"):      # the portable strategies
            check(x, k, axis, direction)
    finally:
        (portable_topk.CHUNKED_MIN_ROW, portable_topk.TIE_PREFIX,
         portable_topk.TIE_PREFIX_PER_K) = saved
