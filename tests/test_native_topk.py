"""top_k1 on the native CPU kernel (csrc/topk.c): bit-identical to the portable path and to the
loop oracle, for every dtype, direction, index dtype, tie pattern, special float, k, axis and
layout, and through every code path of the kernel (k = 1 block max, buffered scan with repeated
selections, k = n sort, rows spread over threads, long rows split into segments and merged)."""
import numpy as np
import pytest
import torch

import torch_dml_ops as tdo
from torch_dml_ops import _native, _native_topk
from helpers import DATA_DTYPES, make_data
from reference import to_bits, top_k1_ref

pytestmark = pytest.mark.skipif(not _native.available(),
                                reason=f"native kernels not built ({_native.import_error()})")

DIRS = ["decreasing", "increasing"]
TOPK_INDEX = [torch.int64, torch.int32, torch.uint32]


def run(x, k, axis, direction, index_dtype, backend, monkeypatch):
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", backend)
    try:
        return tdo.top_k1(x, k, axis, direction, index_dtype)
    finally:
        monkeypatch.delenv("TORCH_DML_OPS_BACKEND")


def check(x, k, axis, direction, monkeypatch, index_dtype=torch.int64, oracle=True):
    """Native against the portable path (values' bits, indices, dtypes, layout) and, when
    ``oracle``, against the loop oracle; returns the native result."""
    got = run(x, k, axis, direction, index_dtype, "native", monkeypatch)
    want = run(x, k, axis, direction, index_dtype, "torch", monkeypatch)
    assert got.values.dtype == x.dtype and got.indices.dtype == index_dtype
    assert got.values.shape == want.values.shape and got.indices.shape == want.indices.shape
    assert got.values.is_contiguous() and got.indices.is_contiguous()
    np.testing.assert_array_equal(to_bits(got.values), to_bits(want.values))
    np.testing.assert_array_equal(got.indices.to(torch.int64).numpy(),
                                  want.indices.to(torch.int64).numpy())
    if oracle:
        bits, idx = top_k1_ref(x, k, axis % x.dim(), direction == "decreasing")
        np.testing.assert_array_equal(to_bits(got.values), bits)
        np.testing.assert_array_equal(got.indices.to(torch.int64).numpy(), idx)
    return got


@pytest.fixture
def threads():
    """``threads(n)``: torch's thread count for one test (restored after)."""
    saved = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(saved)


@pytest.fixture
def parallel(monkeypatch, threads):
    """Every parallel path on small inputs: one row's work per thread, rows split into segments
    of 16 elements or more, a small candidate buffer (many re-selections)."""
    monkeypatch.setattr(_native, "MAX_THREADS", 64)   # 4 threads even on a 2-CPU machine
    threads(4)
    monkeypatch.setattr(_native_topk, "GRAIN", 1)
    monkeypatch.setattr(_native_topk, "SEG_MIN", 16)
    monkeypatch.setattr(_native_topk, "CAP_MIN", 1)


def test_native_is_the_cpu_default(monkeypatch):
    monkeypatch.delenv("TORCH_DML_OPS_BACKEND", raising=False)
    calls = []
    real = _native_topk.top_k1_native
    monkeypatch.setattr(_native_topk, "top_k1_native", lambda *a: calls.append(a) or real(*a))
    res = tdo.top_k1(torch.tensor([1.0, 3.0, 2.0, 3.0]), 2)
    assert res.indices.tolist() == [1, 3] and len(calls) == 1


@pytest.mark.parametrize("index_dtype", TOPK_INDEX, ids=str)
@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=str)
def test_native_dtypes(dtype, direction, index_dtype, monkeypatch):
    g = torch.Generator().manual_seed(3)
    rand = make_data((5, 70), dtype, g)
    ties = torch.randint(0, 4, (5, 70), generator=g).to(dtype)        # values 0..3
    for x in (rand, ties):
        for k in (1, 3, 35, 69, 70):
            check(x, k, -1, direction, monkeypatch, index_dtype)


@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64],
                         ids=str)
def test_native_nan_inf_signed_zero_payloads(dtype, direction, monkeypatch):
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([0.0, nan, -0.0, inf, -inf, 1.0, nan, 0.0, -1.0, -0.0, 5.0, -nan] * 6,
                     dtype=dtype)
    # NaNs with other payloads and signs: all equal, above +inf, copied back bit for bit.
    ibits = {torch.float32: torch.int32, torch.float64: torch.int64}.get(dtype, torch.int16)
    bits = x.view(ibits).clone()
    payload = {torch.float32: [0x7FC00001, -0x003FFFFF, 0x7F800001],
               torch.float64: [0x7FF8000000000001, -0x7FFFFFFFFFFFF, 0x7FF0000000000001],
               torch.float16: [0x7E01, -0x01FF, 0x7C01],
               torch.bfloat16: [0x7FC1, -0x003F, 0x7F81]}[dtype]
    for j, p in enumerate(payload):
        bits[13 + 17 * j] = p
    x = bits.view(dtype)
    # Both paths copy the bits back (the portable path's value gather once quieted float16
    # signalling NaNs and rewrote bfloat16 NaNs; it now moves them as integers).
    for k in (1, 2, 3, 5, 9, 20, 40, 72):
        check(x, k, 0, direction, monkeypatch)
    check(x.reshape(6, 12), 4, 1, direction, monkeypatch)


@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("shape", [(4, 5, 6), (3, 4, 2, 5)], ids=str)
def test_native_every_axis(shape, direction, monkeypatch):
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 4, shape, generator=g).float()
    for axis in range(-len(shape), len(shape)):
        n = shape[axis]
        for k in sorted({1, (n + 1) // 2, n}):
            check(x, k, axis, direction, monkeypatch, torch.int32)


@pytest.mark.parametrize("r", range(1, 9))
def test_native_ranks_1_to_8(r, monkeypatch):
    g = torch.Generator().manual_seed(r)
    shape = tuple(int(s) for s in torch.randint(1, 4, (r,), generator=g))
    x = torch.randint(0, 3, shape, generator=g).to(torch.int16)
    for axis in range(r):
        for d in DIRS:
            check(x, shape[axis], axis, d, monkeypatch)
            check(x, 1, axis, d, monkeypatch)


@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded", "offset"])
def test_native_non_contiguous(layout, monkeypatch):
    g = torch.Generator().manual_seed(6)
    base = torch.randint(0, 5, (6, 8, 5), generator=g).float()
    x = {"transposed": base.transpose(0, 2), "sliced": base[::2, 1::3],
         "expanded": torch.randint(0, 5, (1, 8, 1), generator=g).float().expand(6, 8, 5),
         "offset": base.reshape(-1)[7:207].reshape(10, 20)}[layout]
    for axis in range(x.dim()):
        for d in DIRS:
            check(x, min(3, x.shape[axis]), axis, d, monkeypatch)


@pytest.mark.parametrize("shape,axis", [((0, 5), 1), ((3, 0, 4), 2), ((2, 5, 0), 1), ((0,), 0)])
def test_native_empty(shape, axis, monkeypatch):
    x = torch.empty(shape)
    if x.shape[axis] == 0:
        with pytest.raises(ValueError, match="K must be in"):
            run(x, 1, axis, "decreasing", torch.int64, "native", monkeypatch)
        return
    res = check(x, 2, axis, "decreasing", monkeypatch, torch.uint32, oracle=False)
    want = list(shape)
    want[axis] = 2
    assert list(res.values.shape) == want and res.indices.dtype == torch.uint32


@pytest.mark.usefixtures("parallel")
@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.uint8,
                                   torch.bfloat16], ids=str)
def test_native_parallel_paths(dtype, direction, monkeypatch):
    """Rows over 4 threads, and rows fewer than the threads split into segments (some shorter
    than k, so that segments return fewer than k candidates), with ties across segments."""
    g = torch.Generator().manual_seed(8)
    for rows, n in ((1, 300), (3, 100), (9, 64)):
        rand = make_data((rows, n), dtype, g)
        ties = torch.randint(0, 4, (rows, n), generator=g).to(dtype)
        for x in (rand, ties):
            for k in (1, 2, 7, 40, n - 1, n):
                check(x, k, -1, direction, monkeypatch)
    x = torch.randint(0, 4, (2, 200, 3), generator=g).to(dtype)       # split rows, axis inside
    check(x, 9, 1, direction, monkeypatch)


@pytest.mark.parametrize("direction", DIRS)
def test_native_long_rows_orders_and_ties(direction, threads, monkeypatch):
    """Rows long enough for the real thresholds: the buffered scan with its threshold, repeated
    selections (ascending / descending data accept every element), segments on 2 threads."""
    threads(2)
    g = torch.Generator().manual_seed(9)
    n = 70000
    up = torch.arange(n, dtype=torch.float32)
    rows = [torch.randn(n, generator=g), up, up.flip(0), torch.zeros(n),
            torch.randint(0, 4, (n,), generator=g).float(),
            torch.randn(n, generator=g).round(decimals=1)]
    x = torch.stack(rows)
    for k in (1, 10, 100, 1000):
        check(x, k, -1, direction, monkeypatch, oracle=False)
        for r in range(len(rows)):
            check(x[r:r + 1], k, -1, direction, monkeypatch, oracle=False)
    check(x[:1].double(), 500, -1, direction, monkeypatch, oracle=False)
    check(x[1:2].to(torch.int64), 300, -1, direction, monkeypatch, oracle=False)
    check(x[:, :4000], 4000, -1, direction, monkeypatch, oracle=False)   # full sort


def test_native_cost_constants_do_not_change_results(monkeypatch, threads):
    g = torch.Generator().manual_seed(10)
    x = torch.randint(0, 50, (5, 999), generator=g).to(torch.int32)
    want = run(x, 33, -1, "decreasing", torch.int64, "native", monkeypatch)
    threads(3)
    for grain, seg, cap in ((1, 1, 1), (1, 100, 1000), (10 ** 9, 10 ** 9, 64), (7, 3, 5)):
        monkeypatch.setattr(_native_topk, "GRAIN", grain)
        monkeypatch.setattr(_native_topk, "SEG_MIN", seg)
        monkeypatch.setattr(_native_topk, "CAP_MIN", cap)
        got = run(x, 33, -1, "decreasing", torch.int64, "native", monkeypatch)
        assert torch.equal(got.values, want.values) and torch.equal(got.indices, want.indices)


def test_native_autograd(monkeypatch):
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", "native")
    x = torch.tensor([[1.0, 5.0, 3.0, 5.0]], requires_grad=True)
    res = tdo.top_k1(x, 2)
    (res.values * torch.tensor([[10.0, 20.0]])).sum().backward()
    assert x.grad.tolist() == [[0.0, 10.0, 0.0, 20.0]]


# ------------------------------------------------------------------ property test

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402


@st.composite
def problems(draw):
    r = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 40), min_size=r, max_size=r)))
    axis = draw(st.integers(-r, r - 1))
    k = draw(st.integers(1, shape[axis]))
    dtype = draw(st.sampled_from(DATA_DTYPES))
    direction = draw(st.sampled_from(DIRS))
    span = draw(st.sampled_from([2, 4, 1000]))
    index_dtype = draw(st.sampled_from(TOPK_INDEX))
    knobs = draw(st.tuples(st.sampled_from([1, 2, 3]), st.sampled_from([1, 1 << 15]),
                           st.sampled_from([1, 5, 1 << 15]), st.sampled_from([1, 64])))
    seed = draw(st.integers(0, 2 ** 16))
    return shape, axis, k, dtype, direction, span, index_dtype, knobs, seed


@given(problems())
def test_native_property_matches_portable_and_oracle(problem):
    shape, axis, k, dtype, direction, span, index_dtype, knobs, seed = problem
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, span, shape, generator=g) - (span // 2 if dtype.is_signed else 0)
    x = x.to(dtype) if dtype != torch.bool else x.bool()
    nthreads, grain, seg, cap = knobs
    saved = torch.get_num_threads(), _native_topk.GRAIN, _native_topk.SEG_MIN, _native_topk.CAP_MIN
    with pytest.MonkeyPatch.context() as mp:
        torch.set_num_threads(nthreads)
        _native_topk.GRAIN, _native_topk.SEG_MIN, _native_topk.CAP_MIN = grain, seg, cap
        try:
            check(x, k, axis, direction, mp, index_dtype)
        finally:
            torch.set_num_threads(saved[0])
            _native_topk.GRAIN, _native_topk.SEG_MIN, _native_topk.CAP_MIN = saved[1:]
