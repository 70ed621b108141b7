"""The portable path (``TORCH_DML_OPS_BACKEND=torch``) against plain-Python oracles, on the cases
its fast paths used to get wrong:

* out-of-range coordinates that overflow the linearized row number (column 0 of a large gather
  used to be left to ``index_select``, and ``2**30 * 4`` wraps to 0 in int32);
* out-of-range indices into empty slices (nothing moves, but the call must still raise);
* uint64 data (torch has no uint64 kernels for index_select / scatter_reduce / topk on CPU);
* the bounded caches of the top-k planner.

Every IndexError is compared with the message the other backends build (``raise_index_error``
at the smallest flat position of a bad coordinate); every failing call must leave the caller's
tensors as they were.
"""
import pytest
import torch

import torch_dml_ops as tdo
from torch_dml_ops import _fallback
from torch_dml_ops._validation import raise_index_error

U64 = 2**64


@pytest.fixture(autouse=True)
def portable(monkeypatch):
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", "torch")


def u64(values, shape=None) -> torch.Tensor:
    """A uint64 tensor holding the given Python ints (0 <= v < 2**64), built through int64."""
    t = torch.tensor([v - U64 if v >= 2**63 else v for v in values], dtype=torch.int64)
    t = t.view(torch.uint64)
    return t if shape is None else t.reshape(shape)


def as_ints(t: torch.Tensor) -> list:
    """Exact Python ints of a uint64 tensor (flattened)."""
    return [v % U64 for v in t.contiguous().view(torch.int64).reshape(-1).tolist()]


def make_index_tensor(values, dtype, k) -> torch.Tensor:
    """``[len(values) // k, k]`` indices of ``dtype`` from Python ints (any representable value)."""
    if dtype == torch.uint64:
        return u64(values, (-1, k))
    return torch.tensor(values, dtype=torch.int64).to(dtype).reshape(-1, k)


# ---------------------------------------------------------------------------------------------
# Oracles
# ---------------------------------------------------------------------------------------------

def index_ints(indices: torch.Tensor) -> list:
    """The index values as exact Python ints, flattened (uint64 above 2**63 included)."""
    if indices.dtype == torch.uint64:
        return as_ints(indices)
    return indices.to(torch.int64).reshape(-1).tolist()


def first_bad(indices: torch.Tensor, sizes) -> int:
    """Smallest row-major position of an out-of-range coordinate (signed types wrap once)."""
    vals = index_ints(indices)
    k = len(sizes)
    signed = indices.dtype in (torch.int64, torch.int32)
    for pos, v in enumerate(vals):
        v, s = int(v), sizes[pos % k]
        lo = -s if signed else 0
        if not lo <= v < s:
            return pos
    return -1


def expected_message(op, indices, sizes, batch_dims=0) -> str:
    """The IndexError every backend raises (natural form): ``raise_index_error`` at the
    oracle's position."""
    pos = first_bad(indices, sizes)
    assert pos >= 0, "the oracle found no bad index"
    names = [f"InputTensor dimension {d}" for d in range(batch_dims, batch_dims + len(sizes))]
    with pytest.raises(IndexError) as e:
        raise_index_error(op, indices, pos, indices.shape, sizes, names,
                          indices.dtype in (torch.int64, torch.int32), len(sizes))
    return str(e.value)


# ---------------------------------------------------------------------------------------------
# 1. Out-of-range coordinates whose linearization overflows
# ---------------------------------------------------------------------------------------------

# values out of range for every dimension used below (sizes < 8), including those that wrap to a
# valid row when multiplied by a row stride in the index's own width
BAD_VALUES = {
    torch.int32: [2**30, 2**31 - 1, -2**31, -2**30, 8],
    torch.int64: [2**62, -2**62, 2**63 - 1, -2**63, -9],
    torch.uint32: [2**31, 2**32 - 1, 8],
    torch.uint64: [2**62, 2**63, U64 - 1, 8],
}
CASES = [((5, 4), 2), ((5, 4, 3), 3), ((6, 5, 2), 2), ((7, 3, 2, 2), 1)]
CASE_COLUMNS = [(shape, k, j) for shape, k in CASES for j in range(k)]


def tuples_with_bad(n, shape, k, j, bad, dtype, at=None, second=None):
    """n tuples, all valid ([1, 1, ...]), with coordinate j of tuple ``at`` set to ``bad``; with
    ``second`` = (tuple, column), a second bad coordinate there too (a later flat position)."""
    vals = [1] * (n * k)
    at = n * 2 // 3 if at is None else at
    vals[at * k + j] = bad
    if second is not None:
        vals[second[0] * k + second[1]] = bad
    return make_index_tensor(vals, dtype, k)


@pytest.fixture(params=["small", "large"])
def path(request, monkeypatch):
    """The number of tuples that takes the small (one advanced-indexing call) or the large
    (linearize, then index_select / index_add_ / scatter_reduce_) path: the thresholds are
    lowered so that the large path runs on a few hundred tuples."""
    if request.param == "large":
        monkeypatch.setattr(_fallback, "SMALL_TUPLES", 16)
        monkeypatch.setattr(_fallback, "SMALL_ELEMENTS", 16)
        monkeypatch.setattr(_fallback, "SMALL_SCATTER", 16)
        return 300
    return 12


def _params():
    for dtype, bads in BAD_VALUES.items():
        for bad in bads:
            for shape, k, j in CASE_COLUMNS:
                yield pytest.param(dtype, bad, shape, k, j,
                                   id=f"{str(dtype)[6:]}-{bad}-{'x'.join(map(str, shape))}-k{k}-c{j}")


@pytest.mark.parametrize("dtype,bad,shape,k,j", list(_params()))
def test_gather_nd_overflowing_coordinate_raises(dtype, bad, shape, k, j, path):
    n = path
    x = torch.arange(float(torch.tensor(shape).prod())).reshape(shape)
    i = tuples_with_bad(n, shape, k, j, bad, dtype)
    msg = expected_message("gather_nd", i, shape[:k])
    with pytest.raises(IndexError) as e:
        tdo.gather_nd(x, i)
    assert str(e.value) == msg
    out = torch.full(i.shape[:-1] + shape[k:], 7.0)
    with pytest.raises(IndexError) as e:
        tdo.gather_nd(x, i, out=out)
    assert str(e.value) == msg
    assert bool((out == 7).all()), "a failing gather wrote into out="
    # the backward op range-checks too (it is called with indices the forward accepted, but it
    # is a public registered op)
    with pytest.raises(IndexError) as e:
        torch.ops.torch_dml_ops.gather_nd_backward(torch.ones(out.shape), i, list(shape), 0,
                                                   None, None)
    assert str(e.value) == msg


@pytest.mark.parametrize("dtype,bad,shape,k,j", list(_params()))
def test_scatter_nd_overflowing_coordinate_raises(dtype, bad, shape, k, j, path):
    n = path
    x = torch.arange(float(torch.tensor(shape).prod())).reshape(shape)
    i = tuples_with_bad(n, shape, k, j, bad, dtype)
    upd = torch.full(i.shape[:-1] + shape[k:], -1.0)
    msg = expected_message("scatter_nd", i, shape[:k])
    for reduction in ("none", "add", "max"):
        with pytest.raises(IndexError) as e:
            tdo.scatter_nd(x, i, upd, reduction)
        assert str(e.value) == msg
    before = x.clone()
    with pytest.raises(IndexError) as e:
        tdo.scatter_nd_(x, i, upd)
    assert str(e.value) == msg.replace("scatter_nd:", "scatter_nd_:", 1)
    assert torch.equal(x, before), "a failing scatter_nd_ modified its input"
    out = torch.full(shape, 5.0)
    with pytest.raises(IndexError):
        tdo.scatter_nd(x, i, upd, "add", out=out)
    assert bool((out == 5).all()), "a failing scatter wrote into out="


@pytest.mark.parametrize("dtype", list(BAD_VALUES), ids=str)
def test_smallest_bad_position_is_reported(dtype, path):
    """Two bad coordinates: the message names the one at the smaller flat position, whichever
    column it is in."""
    n = path
    shape, k = (5, 4, 3), 3
    x = torch.arange(60.).reshape(shape)
    bad = BAD_VALUES[dtype][0]
    for at, second in [((n // 2, 2), (n - 1, 0)), ((n // 2, 0), (n // 2 + 1, 1)),
                       ((n // 3, 1), (n // 2, 0))]:
        i = tuples_with_bad(n, shape, k, at[1], bad, dtype, at=at[0], second=second)
        msg = expected_message("gather_nd", i, shape)
        assert f"position ({at[0]}, {at[1]})" in msg
        with pytest.raises(IndexError) as e:
            tdo.gather_nd(x, i)
        assert str(e.value) == msg
        with pytest.raises(IndexError) as e:
            tdo.scatter_nd(x, i, torch.zeros(n))
        assert str(e.value) == msg.replace("gather_nd", "scatter_nd")


@pytest.mark.parametrize("dtype,bad", [(torch.int32, 2**30), (torch.int64, 2**62),
                                       (torch.int64, -2**62)], ids=str)
def test_gather_nd_brief_example_3000_tuples(dtype, bad):
    """The reported case, at the default thresholds: 3000 tuples [0, 1] and one [bad, 1] used
    to return x[0, 1] (the linearized row wrapped into range)."""
    x = torch.arange(20.).reshape(5, 4)
    i = torch.tensor([[0, 1]] * 3000, dtype=dtype)
    i[1234, 0] = bad
    with pytest.raises(IndexError, match=rf"^gather_nd: IndicesTensor value {bad} at position "
                                         rf"\(1234, 0\) is out of range for InputTensor "
                                         rf"dimension 0 of size 5; valid range \[-5, 4\]$"):
        tdo.gather_nd(x, i)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_gather_nd_column0_below_the_other_sizes(dtype, path):
    """Dimension 0 smaller than the others: a column-0 index in [size0, size1) passes the flat
    min/max and is caught by the gather kernel (the linear row is past the end)."""
    x = torch.arange(24.).reshape(3, 8)
    vals = [2, 7] * path
    vals[2 * (path // 2)] = 5
    i = torch.tensor(vals, dtype=dtype).reshape(path, 2)
    with pytest.raises(IndexError) as e:
        tdo.gather_nd(x, i)
    assert str(e.value) == expected_message("gather_nd", i, (3, 8))
    x3 = torch.arange(3 * 8 * 8.).reshape(3, 8, 8)
    with pytest.raises(IndexError) as e:
        tdo.gather_nd(x3, i)
    assert str(e.value) == expected_message("gather_nd", i, (3, 8))


def test_check_and_wrap_plan_refuses_to_delegate_an_overflowing_column0():
    """When ``(col0 + 1) * rows_per_col0`` passes the index dtype's range, column 0 cannot be
    left to the gather kernel: 46339 * 46340**2 wraps in int32 (no tensor that large is needed
    to check the plan itself)."""
    sizes = (1, 46340, 46340)             # 2147395600 rows: int32 linear rows
    idx2 = torch.tensor([[0, 1, 1], [46339, 1, 1]], dtype=torch.int32)
    names = [f"InputTensor dimension {d}" for d in range(3)]
    with pytest.raises(IndexError, match=r"value 46339 at position \(1, 0\) .* dimension 0 of "
                                         r"size 1; valid range \[-1, 0\]"):
        _fallback.check_and_wrap_plan("gather_nd", idx2, idx2, sizes, True, names, first=1)
    assert _fallback.check_and_wrap_plan("gather_nd", idx2[:1], idx2[:1], sizes, True, names,
                                         first=1) == [False] * 3
    # int64 linear rows cannot overflow here: column 0's upper bound is left to the kernel
    wide = idx2.long()
    assert _fallback.check_and_wrap_plan("gather_nd", wide, wide, sizes, True, names,
                                         first=1) == [False] * 3


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_gather_nd_large_batched_overflow_raises(dtype):
    """Batch dims take the fully checked linearization (a per-batch base is added)."""
    x = torch.arange(2 * 5 * 4.).reshape(2, 5, 4)
    bad = 2**30 if dtype == torch.int32 else 2**62
    vals = [1] * (2 * 1500 * 2)
    vals[(1500 + 7) * 2] = bad
    i = torch.tensor(vals, dtype=torch.int64).to(dtype).reshape(2, 1500, 2)
    with pytest.raises(IndexError, match=rf"value {bad} at position \(1, 7, 0\) .* dimension 1 "):
        tdo.gather_nd(x, i, 1)


@pytest.mark.parametrize("dtype", list(BAD_VALUES), ids=str)
def test_gather_nd_valid_extremes_still_gather(dtype, path):
    """The fixed range check accepts every valid index: the largest and, for signed types, the
    most negative one of every dimension."""
    n, shape = path, (5, 4, 3)
    x = torch.randn(shape)
    signed = dtype in (torch.int32, torch.int64)
    vals = []
    for t in range(n):
        vals += [(4, 3, 2), (-5, -4, -3) if signed else (0, 0, 0), (t % 5, t % 4, t % 3)][t % 3]
    i = make_index_tensor(vals, dtype, 3)
    got = tdo.gather_nd(x, i)
    cols = [torch.tensor(c) for c in zip(*[vals[p:p + 3] for p in range(0, len(vals), 3)])]
    assert torch.equal(got, x[cols[0], cols[1], cols[2]])
    got2 = tdo.gather_nd(x, i[:, :2])
    assert torch.equal(got2, x[cols[0], cols[1]])


# ---------------------------------------------------------------------------------------------
# 2. Out-of-range indices into empty slices
# ---------------------------------------------------------------------------------------------

EMPTY_SLICE_CASES = [
    # (input shape, batch_dims, indices values, index dtype, k, bad?)
    ((4, 0), 0, [7], torch.int64, 1, True),
    ((4, 0), 0, [-5], torch.int64, 1, True),
    ((4, 0), 0, [-4], torch.int32, 1, False),
    ((4, 0), 0, [2**63], torch.uint64, 1, True),
    ((4, 0), 0, [4], torch.uint32, 1, True),
    ((4, 3, 0, 2), 0, [1, 3], torch.int64, 2, True),
    ((4, 3, 0, 2), 0, [3, -3], torch.int32, 2, False),
    ((2, 4, 0), 1, [4], torch.int64, 1, True),
    ((2, 4, 0), 1, [-4], torch.int32, 1, False),
]


def _empty_slice_call(op, x, i, b):
    upd_shape = i.shape[:-1] + x.shape[b + i.shape[-1]:]
    if op == "gather":
        return tdo.gather_nd(x, i, b)
    if op == "gather_out":
        out = torch.empty(upd_shape)
        tdo.gather_nd(x, i, b, out=out)
        return out
    if op == "scatter":
        return tdo.scatter_nd(x, i, torch.empty(upd_shape))
    if op == "scatter_mul":
        return tdo.scatter_nd(x, i, torch.empty(upd_shape), "mul")
    if op == "scatter_out":
        out = torch.empty(x.shape)
        tdo.scatter_nd(x, i, torch.empty(upd_shape), out=out)
        return out
    return tdo.scatter_nd_(x, i, torch.empty(upd_shape))


@pytest.mark.parametrize("op,shape,b,vals,dtype,k,bad", [
    (op,) + case
    for op in ("gather", "gather_out", "scatter", "scatter_mul", "scatter_out", "scatter_")
    for case in EMPTY_SLICE_CASES
    if op.startswith("gather") or case[1] == 0          # scatter has no batch dims
])
def test_empty_slice_indices_are_checked(op, shape, b, vals, dtype, k, bad, path):
    n = path
    x = torch.zeros(shape)
    lead = shape[:b]
    batches = shape[0] if b else 1
    # the tuple under test last (of the last batch): the large paths see it late
    flat = [0] * (k * (n * batches - 1)) + vals
    i = make_index_tensor(flat, dtype, k).reshape(lead + (n, k))
    if not bad:
        res = _empty_slice_call(op, x, i, b)
        want = i.shape[:-1] + shape[b + k:] if op.startswith("gather") else shape
        assert tuple(res.shape) == tuple(want) and res.numel() == 0
        return
    if b:     # flat positions run over the batch dims of the indices too
        msg = expected_message("gather_nd", i.reshape(-1, k), shape[b:b + k], b)
        pos = first_bad(i.reshape(-1, k), shape[b:b + k])
        msg = msg.replace(f"position ({pos // k}, {pos % k})",
                          f"position {tuple(int(c) for c in torch.unravel_index(torch.tensor(pos), i.shape))}")
    else:
        msg = expected_message("gather_nd" if op.startswith("gather") else "scatter_nd", i,
                               shape[:k])
    if op == "scatter_":
        msg = msg.replace("scatter_nd:", "scatter_nd_:", 1)
    with pytest.raises(IndexError) as e:
        _empty_slice_call(op, x, i, b)
    assert str(e.value) == msg


# ---------------------------------------------------------------------------------------------
# 4. Bounded caches
# ---------------------------------------------------------------------------------------------

def _caches(module):
    return {name: obj for name, obj in vars(module).items() if hasattr(obj, "cache_info")}


def test_every_cache_in_the_portable_path_is_bounded():
    import torch_dml_ops._forms as forms
    found = {**_caches(_fallback), **_caches(forms)}
    assert "_chunk_plan" in found
    for name, fn in found.items():
        assert fn.cache_info().maxsize is not None, f"{name} is an unbounded cache"


def test_chunk_plan_cache_stays_bounded():
    plan = _fallback._chunk_plan
    limit = plan.cache_info().maxsize
    assert limit is not None and limit <= 16384
    for n in range(300, 300 + 3 * limit):
        plan(n, 1 + n % 7, 1, 2, _fallback.CHUNKED_MIN_ROW)
    info = plan.cache_info()
    assert info.currsize <= limit
    # the recursion still reuses its own entries (one call, ~log2(n) sub-plans): still fast,
    # and the answer does not depend on what the cache held
    plan.cache_clear()
    fresh = plan(1 << 20, 5, 1, 2, _fallback.CHUNKED_MIN_ROW)
    assert plan.cache_info().currsize < 64
    for n in range(10_000, 10_000 + limit + 10):
        plan(n, 3, 1, 2, _fallback.CHUNKED_MIN_ROW)
    assert plan(1 << 20, 5, 1, 2, _fallback.CHUNKED_MIN_ROW) == fresh


def test_top_k1_many_distinct_rows_keep_the_cache_bounded():
    """The reported growth: top_k1 over rows of many distinct lengths (each plans ~log2(n)
    sub-plans) must recycle the planner's cache, not grow it."""
    plan = _fallback._chunk_plan
    plan.cache_clear()
    limit = plan.cache_info().maxsize
    x = torch.randn(2, 600 + limit)
    for n in range(600, 600 + limit):
        tdo.top_k1(x[:, :n], 2 + n % 3)
    info = plan.cache_info()
    assert info.misses > limit, "the test did not plan more rows than the cache holds"
    assert info.currsize <= limit


# ---------------------------------------------------------------------------------------------
# 5. uint64 data
# ---------------------------------------------------------------------------------------------

# values around the sign bit and the ends of the range, plus small ones
U64_POOL = [0, 1, 2, 5, 2**31, 2**32 + 3, 2**62, 2**63 - 1, 2**63, 2**63 + 1, 2**63 + 5,
            U64 - 2, U64 - 1, 12345678901234567890]


def _pick(g, n):
    return [U64_POOL[int(v)] for v in torch.randint(0, len(U64_POOL), (n,), generator=g)]


def _wrap(v):
    return v % U64


def scatter_oracle(data, coords, upd, reduction, slice_len):
    out = list(data)
    for t, row in enumerate(coords):
        for s in range(slice_len):
            p, u = row * slice_len + s, upd[t * slice_len + s]
            cur = out[p]
            out[p] = {"none": u, "add": _wrap(cur + u), "mul": _wrap(cur * u),
                      "max": max(cur, u), "min": min(cur, u)}[reduction]
    return out


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32, torch.uint64], ids=str)
def test_gather_nd_uint64_moves_bits(index_dtype, path):
    n = path
    g = torch.Generator().manual_seed(n)
    data = _pick(g, 7 * 5 * 3)
    x = u64(data, (7, 5, 3))
    rows = torch.randint(0, 7 * 5, (n,), generator=g).tolist()
    idx = make_index_tensor([v for r in rows for v in (r // 5, r % 5)], index_dtype, 2)
    got = tdo.gather_nd(x, idx)
    assert got.dtype == torch.uint64 and got.shape == (n, 3)
    assert as_ints(got) == [data[r * 3 + s] for r in rows for s in range(3)]
    # k = 3 (element gather), non-contiguous input, out=
    xt = x.transpose(0, 1)
    idx3 = make_index_tensor([v for r in rows for v in (r % 5, r // 5, r % 3)], index_dtype, 3)
    got3 = tdo.gather_nd(xt, idx3)
    assert as_ints(got3) == [data[(r // 5) * 15 + (r % 5) * 3 + r % 3] for r in rows]
    out = torch.empty(n, dtype=torch.uint64)
    tdo.gather_nd(x.contiguous(), idx3.index_select(1, torch.tensor([1, 0, 2])), out=out)
    assert as_ints(out) == as_ints(got3)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("slice_len", [1, 3])
def test_scatter_nd_uint64_unsigned_semantics(reduction, slice_len, path):
    n = path
    g = torch.Generator().manual_seed(n + slice_len)
    rows = 6
    data = _pick(g, rows * slice_len)
    upd = _pick(g, n * slice_len)
    coords = torch.randint(0, rows, (n,), generator=g).tolist()
    if reduction == "none":           # without duplicates: any backend's "none" is exact
        coords = list(range(min(n, rows)))
        n = len(coords)
        upd = upd[: n * slice_len]
    x = u64(data, (rows, slice_len))
    u = u64(upd, (n, slice_len))
    i = torch.tensor(coords).reshape(n, 1)
    want = scatter_oracle(data, coords, upd, reduction, slice_len)
    got = tdo.scatter_nd(x, i, u, reduction)
    assert got.dtype == torch.uint64
    assert as_ints(got) == want
    assert as_ints(x) == data, "the functional scatter modified its input"
    # in place, and into a strided out=
    y = x.clone()
    tdo.scatter_nd_(y, i, u, reduction)
    assert as_ints(y) == want
    out = torch.empty(slice_len, rows, dtype=torch.uint64).t()
    tdo.scatter_nd(x, i, u, reduction, out=out)
    assert as_ints(out) == want


def topk_oracle(values, k, largest):
    """Stable: by unsigned value in the direction, ties by the lower index."""
    order = sorted(range(len(values)), key=lambda p: (-values[p] if largest else values[p], p))
    return [values[p] for p in order[:k]], order[:k]


@pytest.mark.parametrize("direction", ["decreasing", "increasing"])
@pytest.mark.parametrize("n,k", [(1, 1), (7, 1), (7, 3), (7, 7), (600, 1), (600, 5), (3000, 40)])
def test_top_k1_uint64_unsigned_stable_order(direction, n, k):
    g = torch.Generator().manual_seed(n * 100 + k)
    rows = [_pick(g, n) for _ in range(3)]        # few distinct values: many ties
    x = u64([v for r in rows for v in r], (3, n))
    largest = direction == "decreasing"
    for index_dtype in (torch.int64, torch.uint32):
        vals, idx = tdo.top_k1(x, k, -1, direction, index_dtype)
        assert vals.dtype == torch.uint64 and idx.dtype == index_dtype
        for r in range(3):
            want_v, want_i = topk_oracle(rows[r], k, largest)
            assert as_ints(vals[r]) == want_v
            assert idx[r].to(torch.int64).tolist() == want_i
    # along another axis (a strided row)
    vt, it = tdo.top_k1(x.t().contiguous(), k, 0, direction)
    vals, idx = tdo.top_k1(x, k, -1, direction)
    assert torch.equal(vt.t().view(torch.int64), vals.view(torch.int64))
    assert torch.equal(it.t(), idx)


def test_top_k1_uint64_sign_bit_orders_above():
    x = u64([5, 2**63, 2**63 - 1, U64 - 1, 0, 2**63])
    v, i = tdo.top_k1(x, 6)
    assert as_ints(v) == [U64 - 1, 2**63, 2**63, 2**63 - 1, 5, 0]
    assert i.tolist() == [3, 1, 5, 2, 0, 4]
    v, i = tdo.top_k1(x, 3, direction="increasing")
    assert as_ints(v) == [0, 5, 2**63 - 1] and i.tolist() == [4, 0, 2]


# ---------------------------------------------------------------------------------------------
# scatter_nd_torch's caller-facing options
# ---------------------------------------------------------------------------------------------

def _layout(x, i):
    from torch_dml_ops._forms import gather_layout
    return gather_layout("scatter_nd", x.shape, i.shape, 0, None, None,
                         updates_name="UpdatesTensor")


def test_scatter_nd_torch_names_the_caller_in_errors():
    x, i = torch.zeros(4, 0), torch.tensor([[7]])
    with pytest.raises(IndexError, match=r"^scatter_nd_: IndicesTensor value 7 at position "):
        _fallback.scatter_nd_torch(x, i, torch.zeros(1, 0), _layout(x, i), "none",
                                   op="scatter_nd_")


def test_scatter_nd_torch_deterministic_argument_keeps_the_last_duplicate(monkeypatch):
    """``deterministic=True`` (the op's argument) without torch's global mode: an element
    scatter on the large path goes through the claim pass, so the last duplicate wins."""
    monkeypatch.setattr(_fallback, "SMALL_SCATTER", 16)
    assert not torch.are_deterministic_algorithms_enabled()
    x = torch.zeros(5)
    i = torch.tensor([0, 3, 1, 3, 0, 3] * 50).reshape(-1, 1)
    u = torch.arange(300.)
    want = x.clone()
    for t, r in enumerate(i[:, 0].tolist()):
        want[r] = u[t]
    seen = []
    real = _fallback.scatter_overwrite_rows
    monkeypatch.setattr(_fallback, "scatter_overwrite_rows",
                        lambda *a: seen.append(a[3]) or real(*a))
    got = _fallback.scatter_nd_torch(x.clone(), i, u, _layout(x, i), "none", deterministic=True)
    assert seen == [True] and torch.equal(got, want)
