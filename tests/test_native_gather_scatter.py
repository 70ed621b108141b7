"""The native CPU kernels of gather_nd / scatter_nd (csrc/gather_scatter.c): bit-identical to the
portable path and to the loop oracle, same errors, caller's tensors untouched on failure,
deterministic duplicates, multi-threaded runs."""
import os

import numpy as np
import pytest
import torch

import torch_dml_ops as tdo
from torch_dml_ops import _native, _native_gather_scatter as ngs
from helpers import DATA_DTYPES, INDEX_DTYPES, make_data, make_indices
from reference import gather_nd_ref, scatter_nd_ref, to_bits

pytestmark = pytest.mark.skipif(not _native.available(), reason="native kernels not built")

REDUCTIONS = ["none", "add", "mul", "max", "min"]


def bits_equal(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    np.testing.assert_array_equal(to_bits(a), to_bits(b))


@pytest.fixture
def native_only(monkeypatch):
    """Native backend, and the portable path made to fail: a covered call must not reach it."""
    import sys
    g_mod, s_mod = sys.modules["torch_dml_ops.gather_nd"], sys.modules["torch_dml_ops.scatter_nd"]
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", "native")

    def refuse(*a, **k):
        raise AssertionError("the portable path ran for a call the native kernels cover")
    monkeypatch.setattr(g_mod, "gather_nd_torch", refuse)
    monkeypatch.setattr(s_mod, "scatter_nd_torch", refuse)


@pytest.fixture
def threads2(monkeypatch):
    """Two threads and a tiny grain: every kernel splits even small problems."""
    prev = torch.get_num_threads()
    monkeypatch.setattr(_native, "MAX_THREADS", 64)   # 2 threads even on a 1-CPU machine
    torch.set_num_threads(2)
    monkeypatch.setattr(ngs, "GRAIN", 1)
    yield
    torch.set_num_threads(prev)


def both(fn, monkeypatch):
    """fn() under the portable path, then under the native one."""
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", "torch")
    a = fn()
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", "native")
    return a, fn()


def errors(fn, monkeypatch):
    """The IndexError message of fn() on each path (they must agree)."""
    msgs = []
    for mode in ("torch", "native"):
        monkeypatch.setenv("TORCH_DML_OPS_BACKEND", mode)
        with pytest.raises(IndexError) as e:
            fn()
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]
    return msgs[1]


def strided_like(t):
    """A non-contiguous tensor with t's values (every other element of a wider tensor)."""
    wide = torch.zeros(t.shape[:-1] + (2 * t.shape[-1],), dtype=t.dtype) if t.dim() else t
    if t.dim() == 0:
        return t
    wide[..., ::2] = t
    s = wide[..., ::2]
    assert not s.is_contiguous() or t.numel() <= 1
    return s


# ------------------------------------------------------------------ gather_nd

@pytest.mark.usefixtures("native_only")
@pytest.mark.parametrize("dtype", DATA_DTYPES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_gather_every_dtype(dtype, index_dtype):
    x = make_data((5, 6, 7), dtype)
    for k in (1, 2, 3):
        i = make_indices((4, 3), x.shape[:k], index_dtype, negative=True)
        bits_equal_ref(tdo.gather_nd(x, i), gather_nd_ref(x, i))


def bits_equal_ref(actual, expected_bits):
    got = to_bits(actual)
    assert got.shape == expected_bits.shape
    np.testing.assert_array_equal(got, expected_bits)


@pytest.mark.usefixtures("native_only")
@pytest.mark.parametrize("rank", range(1, 9))
@pytest.mark.parametrize("slice_dims", [0, 1, 2])
def test_gather_ranks_and_slices(rank, slice_dims):
    """Ranks 1-8, every k, slices of 1, 2, 4, 8, 16 and other byte lengths."""
    g = torch.Generator().manual_seed(rank)
    shape = tuple(int(s) for s in torch.randint(1, 4, (rank,), generator=g))
    for k in range(1, rank + 1):
        for dtype in (torch.uint8, torch.int16, torch.float32, torch.float64):
            x = make_data(shape, dtype, g)
            if rank - k < slice_dims:
                continue
            i = make_indices((7,), shape[:k], torch.int64, negative=True, generator=g)
            bits_equal_ref(tdo.gather_nd(x, i), gather_nd_ref(x, i))


@pytest.mark.usefixtures("native_only")
@pytest.mark.parametrize("b", [1, 2])
def test_gather_batch_dims(b):
    x = make_data((3, 2, 5, 4, 3), torch.float32)
    for k in range(1, 5 - b):
        i = make_indices(x.shape[:b] + (6,), x.shape[b:b + k], torch.int32, negative=True)
        bits_equal_ref(tdo.gather_nd(x, i, b), gather_nd_ref(x, i, b))


@pytest.mark.usefixtures("native_only")
def test_gather_dml_form():
    x = make_data((1, 1, 4, 5, 6), torch.float16)
    i = make_indices((1, 1, 1, 3), (4, 5), torch.uint32).reshape(1, 1, 1, 3, 2)
    out = tdo.gather_nd(x, i, input_dimension_count=3, indices_dimension_count=2)
    assert out.shape == (1, 1, 1, 3, 6)
    bits_equal_ref(out.reshape(3, 6), gather_nd_ref(x.reshape(4, 5, 6), i.reshape(3, 2)))


def test_gather_matches_portable_layouts(monkeypatch, threads2):
    """Strided indices and out=, empty tensors, zero-length slices; native vs portable."""
    x = make_data((6, 5, 4), torch.float32)
    i = make_indices((9,), (6, 5), torch.int64, negative=True)
    cases = [
        lambda: tdo.gather_nd(x, strided_like(i)),
        lambda: tdo.gather_nd(x, i, out=strided_like(torch.zeros(9, 4))),
        lambda: tdo.gather_nd(x, i, out=torch.zeros(9, 4)),
        lambda: tdo.gather_nd(x.transpose(0, 1).contiguous().transpose(0, 1), i),   # strided input
        lambda: tdo.gather_nd(x, i[:0]),
        lambda: tdo.gather_nd(torch.zeros(6, 5, 0), i),
        lambda: tdo.gather_nd(x, i.reshape(3, 3, 2), 0),
    ]
    for fn in cases:
        a, b = both(fn, monkeypatch)
        bits_equal(b, a)


def test_gather_multithreaded_large(monkeypatch):
    """Above the real grain with two threads: elements, rows, batch dims."""
    prev = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = make_data((256, 256), torch.float32)
        i = make_indices((100000,), (256, 256), torch.int64, negative=True)
        a, b = both(lambda: tdo.gather_nd(x, i), monkeypatch)
        bits_equal(b, a)
        i1 = make_indices((70000,), (256,), torch.int32, negative=True)
        a, b = both(lambda: tdo.gather_nd(x, i1), monkeypatch)
        bits_equal(b, a)
        xb = make_data((4, 300, 50), torch.int16)
        ib = make_indices((4, 40000), (300,), torch.uint32)
        a, b = both(lambda: tdo.gather_nd(xb, ib, 1), monkeypatch)
        bits_equal(b, a)
    finally:
        torch.set_num_threads(prev)


@pytest.mark.usefixtures("native_only")
def test_gather_large_rows_streaming_stores():
    """Outputs of 16 MB and more are written with non-temporal stores (16-byte aligned rows), a
    misaligned out= falls back to plain copies: both exact."""
    x = make_data((600, 1024), torch.float32)
    i = make_indices((4200,), (600,), torch.int64, negative=True)
    expected = x[i[:, 0]]
    assert torch.equal(tdo.gather_nd(x, i), expected)
    buf = torch.zeros(4200 * 1024 + 1)
    out = buf[1:].view(4200, 1024)          # contiguous, 4 bytes off 16-byte alignment
    tdo.gather_nd(x, i, out=out)
    assert torch.equal(out, expected) and buf[0] == 0
    xo = make_data((600, 1023), torch.float32)     # rows not a multiple of 16 bytes
    assert torch.equal(tdo.gather_nd(xo, i), xo[i[:, 0]])


def _bad_gather_cases():
    for dt in INDEX_DTYPES:
        signed = dt in (torch.int64, torch.int32)
        for col, val in [(0, 6), (1, 5), (0, -7), (1, -6), (0, 2**63 + 3)]:
            if (val < 0 and not signed) or (val >= 2**31 and dt != torch.uint64):
                continue
            for where in (0, 4, 39):
                yield pytest.param(dt, col, val, where, id=f"{dt}-c{col}-{val}-t{where}")


@pytest.mark.parametrize("index_dtype,bad_col,bad_value,where", list(_bad_gather_cases()))
def test_gather_out_of_range(monkeypatch, threads2, index_dtype, bad_col, bad_value, where):
    x = make_data((6, 5, 3), torch.float32)
    signed = index_dtype in (torch.int64, torch.int32)
    i = make_indices((40,), (6, 5), torch.int64, negative=signed).tolist()
    i[where][bad_col] = bad_value
    if where + 3 < 40:
        i[where + 3][0] = 100     # a later bad tuple must not be the one reported
    if index_dtype == torch.uint64:
        i = torch.tensor([[v % 2**64 for v in row] for row in i], dtype=torch.uint64)
    else:
        i = torch.tensor(i).to(index_dtype)
    msg = errors(lambda: tdo.gather_nd(x, i), monkeypatch)
    assert f"value {bad_value} at position ({where}, {bad_col})" in msg
    for out in (torch.full((40, 3), 7.0), strided_like(torch.full((40, 3), 7.0))):
        errors(lambda: tdo.gather_nd(x, i, out=out), monkeypatch)
        assert torch.equal(out, torch.full((40, 3), 7.0))


def test_gather_empty_dimension_and_batch_error(monkeypatch):
    x = torch.zeros(3, 0, 2)
    i = torch.zeros(4, 2, dtype=torch.int64)
    assert "dimension 1 of size 0" in errors(lambda: tdo.gather_nd(x, i), monkeypatch)
    xb = torch.randn(2, 5, 3)
    ib = make_indices((2, 4), (5,), torch.int64).reshape(2, 4, 1)
    ib[1, 2, 0] = -6
    assert "position (1, 2, 0)" in errors(lambda: tdo.gather_nd(xb, ib, 1), monkeypatch)


# ------------------------------------------------------------------ scatter_nd

def make_updates(x, i, g=None):
    k = i.shape[-1]
    return make_data(tuple(i.shape[:-1]) + tuple(x.shape[k:]), x.dtype, g)


def special_floats(t, nan=True):
    """Sprinkle NaN, +-0.0, +-inf into a float tensor (reductions' edge cases).

    ``nan=False`` for add/mul: when two NaNs of different payloads meet, which one survives
    depends on the instruction torch happens to use (scalar ``a + b`` keeps a's, its vectorized
    fmadd b's), so only NaN-free inputs have one right answer (NaNs made by inf - inf or
    0 * inf all have the default payload and still occur)."""
    if not t.dtype.is_floating_point:
        return t
    t = t.clone()
    flat = t.view(-1)
    specials = torch.tensor([float("nan") if nan else 1.5, 0.0, -0.0, float("inf"),
                             -float("inf")], dtype=t.dtype)
    pos = torch.randperm(flat.numel())[: max(1, flat.numel() // 4)]
    flat[pos] = specials[torch.randint(0, 5, (pos.numel(),))]
    return t


@pytest.mark.parametrize("dtype", DATA_DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_every_dtype_reduction(monkeypatch, deterministic, dtype, reduction):
    """Native (or its delegation) bit-identical to the portable path and to the oracle, with
    duplicates and special float values."""
    g = torch.Generator().manual_seed(1)
    nan = reduction not in ("add", "mul")
    x = special_floats(make_data((6, 5, 3), dtype, g), nan)
    for k in (1, 2, 3):
        i = make_indices((40,), x.shape[:k], torch.int64, negative=True, generator=g)
        u = special_floats(make_updates(x, i, g), nan)
        a, b = both(lambda: tdo.scatter_nd(x, i, u, reduction), monkeypatch)
        bits_equal(b, a)
        if dtype.is_floating_point:
            continue   # the oracle's numpy round trip changes NaN payloads (the path above is exact)
        bits_equal(b, scatter_nd_ref(x, i, u, reduction))


@pytest.mark.usefixtures("native_only")
@pytest.mark.parametrize("dtype", [d for d in DATA_DTYPES if d not in (torch.float16, torch.bfloat16)])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_covered_runs_native(dtype, reduction):
    x = make_data((4, 5, 6), dtype)
    i = make_indices((30,), (4, 5), torch.int32, negative=True)
    u = make_updates(x, i)
    expected = scatter_nd_ref(x, i, u, reduction)
    res = tdo.scatter_nd(x, i, u, reduction)
    bits_equal(res, expected) if not dtype.is_floating_point else torch.testing.assert_close(
        res, expected, rtol=0, atol=0, equal_nan=True)
    out = torch.empty_like(x)
    tdo.scatter_nd(x, i, u, reduction, out=out)
    bits_equal(out, res)
    y = x.clone()
    tdo.scatter_nd_(y, i, u, reduction)
    bits_equal(y, res)


def test_scatter_half_reductions_delegate(monkeypatch):
    assert ngs.scatter_covers(torch.float16, "none") and not ngs.scatter_covers(torch.float16, "add")
    assert not ngs.scatter_covers(torch.bfloat16, "max")


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("row_elems", [1, 2, 4, 5, 64])
def test_scatter_duplicates_last_wins(monkeypatch, threads2, index_dtype, row_elems):
    """Rows never mix, the last duplicate in index order wins, on any thread count."""
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", "native")
    x = torch.zeros(8, row_elems)
    i = torch.randint(0, 8, (500, 1)).to(index_dtype)
    u = torch.arange(500, dtype=torch.float32).unsqueeze(1).expand(500, row_elems).contiguous()
    res = tdo.scatter_nd(x, i, u)
    last = {}
    for t, r in enumerate(i.view(-1).tolist()):
        last[r] = t
    for r in range(8):
        assert torch.all(res[r] == (last[r] if r in last else 0)), r


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_layouts_match_portable(monkeypatch, threads2, deterministic, reduction):
    """Strided input / indices / updates / out, in place on a strided tensor, DML form, empty."""
    x = make_data((7, 6, 5), torch.float64)
    i = make_indices((50,), (7, 6), torch.int64, negative=True)
    u = make_updates(x, i)
    xs = x.transpose(0, 2).contiguous().transpose(0, 2)

    def inplace(t):
        def f():
            y = t.clone() if t.is_contiguous() else t.transpose(0, 2).clone().transpose(0, 2)
            tdo.scatter_nd_(y, i, u, reduction)
            return y
        return f

    def with_out(o):
        def f():
            o.fill_(3.0)
            return tdo.scatter_nd(x, i, u, reduction, out=o).clone()
        return f
    cases = [
        lambda: tdo.scatter_nd(xs, i, u, reduction),
        lambda: tdo.scatter_nd(x, strided_like(i), strided_like(u), reduction),
        inplace(x), inplace(xs),
        with_out(torch.empty(7, 6, 5, dtype=torch.float64)),
        with_out(torch.empty(5, 6, 7, dtype=torch.float64).transpose(0, 2)),
        lambda: tdo.scatter_nd(x, i[:0], u[:0], reduction),
        lambda: tdo.scatter_nd(torch.zeros(7, 6, 0, dtype=torch.float64), i,
                               torch.zeros(50, 0, dtype=torch.float64), reduction),
        lambda: tdo.scatter_nd(x.reshape(1, 7, 6, 5), i.reshape(1, 1, 50, 2),
                               u.reshape(1, 1, 50, 5), reduction, input_dimension_count=3,
                               indices_dimension_count=2),
    ]
    for fn in cases:
        a, b = both(fn, monkeypatch)
        bits_equal(b, a)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_scatter_multithreaded_large(monkeypatch, deterministic, reduction, dtype):
    """Above the real grain, two threads, many duplicates: identical to the portable path."""
    prev = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = make_data((512, 64), dtype)
        i = make_indices((60000,), (512, 64), torch.int64, negative=True)
        u = make_updates(x, i)
        a, b = both(lambda: tdo.scatter_nd(x, i, u, reduction), monkeypatch)
        bits_equal(b, a)
        i1 = make_indices((3000,), (512,), torch.int32)
        u1 = make_updates(x, i1)
        a, b = both(lambda: tdo.scatter_nd(x, i1, u1, reduction), monkeypatch)
        bits_equal(b, a)
    finally:
        torch.set_num_threads(prev)


def _bad_scatter_cases():
    for dt in INDEX_DTYPES:
        signed = dt in (torch.int64, torch.int32)
        for col, val in [(0, 6), (1, -6), (0, 2**63 + 1)]:
            if (val < 0 and not signed) or (val >= 2**31 and dt != torch.uint64):
                continue
            for where in (0, 29):
                yield pytest.param(dt, col, val, where, id=f"{dt}-c{col}-{val}-t{where}")


@pytest.mark.parametrize("index_dtype,bad_col,bad_value,where", list(_bad_scatter_cases()))
@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_out_of_range_untouched(monkeypatch, threads2, index_dtype, bad_col, bad_value,
                                        where, reduction):
    x = make_data((6, 5, 3), torch.float32)
    signed = index_dtype in (torch.int64, torch.int32)
    i = make_indices((30,), (6, 5), torch.int64, negative=signed).tolist()
    i[where][bad_col] = bad_value
    if index_dtype == torch.uint64:
        i = torch.tensor([[v % 2**64 for v in row] for row in i], dtype=torch.uint64)
    else:
        i = torch.tensor(i).to(index_dtype)
    u = make_updates(x, i)
    msg = errors(lambda: tdo.scatter_nd(x, i, u, reduction), monkeypatch)
    assert f"value {bad_value} at position ({where}, {bad_col})" in msg
    x0 = x.clone()
    out = torch.full_like(x, 9.0)
    errors(lambda: tdo.scatter_nd(x, i, u, reduction, out=out), monkeypatch)
    assert torch.equal(out, torch.full_like(x, 9.0)) and torch.equal(x, x0)
    errors(lambda: tdo.scatter_nd_(x, i, u, reduction), monkeypatch)
    assert torch.equal(x, x0)


def test_scatter_in_place_bumps_version(monkeypatch):
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", "native")
    x = torch.zeros(4, 3)
    v = x._version
    tdo.scatter_nd_(x, torch.tensor([[1]]), torch.ones(1, 3))
    assert x._version > v
    out = torch.zeros(1, 3)
    v = out._version
    tdo.gather_nd(x, torch.tensor([[1]]), out=out)
    assert out._version > v and torch.equal(out, torch.ones(1, 3))


# ------------------------------------------------------------------ property test

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402


@st.composite
def problems(draw):
    r = draw(st.integers(1, 5))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=r, max_size=r)))
    b = draw(st.integers(0, r - 1))
    k = draw(st.integers(1, r - b))
    n = draw(st.integers(0, 40))
    dtype = draw(st.sampled_from(DATA_DTYPES))
    idx_dtype = draw(st.sampled_from(INDEX_DTYPES))
    reduction = draw(st.sampled_from(REDUCTIONS))
    bad = draw(st.sampled_from([None, 0, 1, -1]))
    seed = draw(st.integers(0, 2**16))
    grain = draw(st.sampled_from([1, ngs.GRAIN]))
    return shape, b, k, n, dtype, idx_dtype, reduction, bad, seed, grain


def _run(fn, mode):
    os.environ["TORCH_DML_OPS_BACKEND"] = mode
    try:
        return fn(), None
    except IndexError as e:
        return None, str(e)
    finally:
        os.environ.pop("TORCH_DML_OPS_BACKEND", None)


@given(problems())
def test_property_native_matches_portable(problem):
    shape, b, k, n, dtype, idx_dtype, reduction, bad, seed, grain = problem
    g = torch.Generator().manual_seed(seed)
    x = make_data(shape, dtype, g)
    i = make_indices(shape[:b] + (n,), shape[b:b + k], idx_dtype, negative=True, generator=g)
    if bad is not None and i.numel():
        flat = i.view(-1)
        flat[bad % flat.numel()] = 5      # every dim has size <= 4
    saved, prev_t = ngs.GRAIN, torch.get_num_threads()
    ngs.GRAIN = grain
    torch.set_num_threads(2)
    prev_det = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        fns = [lambda: tdo.gather_nd(x, i, b)]
        if b == 0:
            u = make_updates(x, i, g)
            fns.append(lambda: tdo.scatter_nd(x, i, u, reduction))
        for fn in fns:
            (a, ea), (c, ec) = _run(fn, "torch"), _run(fn, "native")
            assert ea == ec
            if a is not None:
                bits_equal(c, a)
    finally:
        ngs.GRAIN = saved
        torch.set_num_threads(prev_t)
        torch.use_deterministic_algorithms(prev_det)
