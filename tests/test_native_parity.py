"""Native CPU kernels (csrc/*.c) at the edges where they must not differ from the portable path:

* absurd thread counts (``torch.set_num_threads(1000)``): the kernels use a bounded number of
  threads and per-thread scratch, and the results do not change;
* tensors whose storage was resized (``untyped_storage().resize_(0)``, as FSDP does to sharded
  parameters): a RuntimeError naming the tensor, before any pointer reaches C and before
  anything is written;
* uint64 data: gather / scatter (every reduction, unsigned wraparound and order) and top_k1
  (unsigned, stable), against plain-Python oracles with values above 2**63.
"""
import os
import re
import sys

import pytest
import torch

import torch_dml_ops as tdo
from torch_dml_ops import _native, _native_gather_scatter as ngs, _native_topk

pytestmark = pytest.mark.skipif(not _native.available(),
                                reason=f"native kernels not built ({_native.import_error()})")

U64 = 1 << 64


@pytest.fixture
def native(monkeypatch):
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", "native")


@pytest.fixture
def native_only(monkeypatch, native):
    """Native backend with the portable paths made to fail: a covered call must not reach them."""
    def refuse(*a, **k):
        raise AssertionError("the portable path ran for a call the native kernels cover")
    monkeypatch.setattr(sys.modules["torch_dml_ops.gather_nd"], "gather_nd_torch", refuse)
    monkeypatch.setattr(sys.modules["torch_dml_ops.scatter_nd"], "scatter_nd_torch", refuse)
    monkeypatch.setattr(sys.modules["torch_dml_ops.top_k1"], "top_k1_torch", refuse)


@pytest.fixture
def num_threads():
    """``num_threads(n)``: torch's thread count for one test, restored after."""
    saved = torch.get_num_threads()
    try:
        yield torch.set_num_threads
    finally:
        torch.set_num_threads(saved)


# =============================================================================================
# 1. Absurd thread counts
# =============================================================================================

def test_threads_bounded_by_hardware(num_threads):
    num_threads(1000)
    assert 1 <= _native.HARDWARE_THREADS <= (os.cpu_count() or 1)
    assert _native.MAX_THREADS == min(64, _native.HARDWARE_THREADS)
    assert _native.threads() == _native.MAX_THREADS
    num_threads(1)
    assert _native.threads() == 1


def test_top_k1_1000_threads_large_k(native):
    """The report's case: 2**22 of 2**25 on one row asked for 1000 threads used to allocate
    ~32 GB of per-segment candidates (MemoryError).  Rounded to 0.01, so that ties abound, also
    across the k-th value.  Checked in O(n log n) at most: the right set (count above the k-th
    value, lowest indices among its ties), sorted, stable, values at the indices."""
    g = torch.Generator().manual_seed(0)
    n, k = 2 ** 25, 2 ** 22
    x = torch.randn(1, n, generator=g).round(decimals=2)
    saved = torch.get_num_threads()
    torch.set_num_threads(1000)
    try:
        res = tdo.top_k1(x, k)
    finally:
        torch.set_num_threads(saved)
    v, i = res.values[0], res.indices[0]
    assert torch.equal(x[0, i], v)
    assert bool((v[:-1] >= v[1:]).all())
    tie = v[:-1] == v[1:]
    assert bool((i[1:][tie] > i[:-1][tie]).all())                     # stable among ties
    kth = v[-1]
    above = int((x[0] > kth).sum())
    assert above < k <= int((x[0] >= kth).sum())
    assert int((v > kth).sum()) == above
    ties_taken = i[v == kth]
    assert torch.equal(ties_taken, (x[0] == kth).nonzero()[: k - above, 0])
    assert i.unique().numel() == k


def test_top_k1_c_kernel_caps_threads_and_segments():
    """The C kernel itself bounds the segments by the threads it can start and their candidate
    buffers by the segment length (before: rows * segments * k composites, 512 GB here)."""
    g = torch.Generator().manual_seed(1)
    n, k = 2 ** 22, 2 ** 21
    x = torch.randint(-50, 50, (1, n), generator=g, dtype=torch.int32)

    def run(nthreads):
        v = torch.empty(1, k, dtype=torch.int32)
        i = torch.empty(1, k, dtype=torch.int64)
        rc = _native_topk._kernel()(x.data_ptr(), _native_topk.DTYPE_CODES[torch.int32], 1, n, 1,
                                    k, 1, v.data_ptr(), i.data_ptr(),
                                    _native.INDEX_CODES[torch.int64], nthreads, 1, 128, 64)
        assert rc == 0
        return v, i
    v1, i1 = run(1)
    vn, i_n = run(10 ** 6)
    assert torch.equal(v1, vn) and torch.equal(i1, i_n)


def _topk_oracle(vals, k, largest):
    """Stable top-k of a list of Python ints / floats: (values, indices)."""
    order = sorted(range(len(vals)), key=lambda j: (-vals[j] if largest else vals[j], j))[:k]
    return [vals[j] for j in order], order


@pytest.mark.parametrize("rows,n", [(1, 300), (2, 257), (5, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8], ids=str)
def test_top_k1_many_threads_many_segments(native, num_threads, monkeypatch, rows, n, dtype):
    """1000 threads requested, the hardware bound lifted to the C cap (64): rows split into
    many short segments (some shorter than k), merged; same as the oracle."""
    monkeypatch.setattr(_native, "MAX_THREADS", 64)
    monkeypatch.setattr(_native_topk, "GRAIN", 1)
    monkeypatch.setattr(_native_topk, "SEG_MIN", 4)
    monkeypatch.setattr(_native_topk, "CAP_MIN", 1)
    num_threads(1000)
    g = torch.Generator().manual_seed(rows * n)
    x = torch.randint(0, 9, (rows, n), generator=g).to(dtype)        # many ties
    for k in (1, 5, 40, n - 1):
        for largest in (True, False):
            res = tdo.top_k1(x, k, -1, "decreasing" if largest else "increasing")
            for r in range(rows):
                want_v, want_i = _topk_oracle(x[r].tolist(), k, largest)
                assert res.values[r].tolist() == want_v
                assert res.indices[r].tolist() == want_i


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
@pytest.mark.parametrize("slice_len", [1, 3])
def test_gather_scatter_1000_threads(native, num_threads, monkeypatch, reduction, slice_len):
    """1000 threads requested, tiny grain: the kernels get a thread count and a number of row
    partitions bounded by the hardware (each partition rescans every tuple), and the results
    equal the portable path's."""
    calls = []
    real_call = ngs._call
    monkeypatch.setattr(ngs, "_call", lambda fn, args: calls.append(list(args)) or
                        real_call(fn, args))
    monkeypatch.setattr(ngs, "GRAIN", 1)
    num_threads(1000)
    g = torch.Generator().manual_seed(slice_len)
    x = torch.randn(50, slice_len, generator=g).double()
    i = torch.randint(0, 50, (400, 1), generator=g)
    u = torch.randn(400, slice_len, generator=g).double()
    got_g = tdo.gather_nd(x, i)
    got_s = tdo.scatter_nd(x, i, u, reduction)
    (gather_args, scatter_args) = calls[-2:]
    bound = _native.MAX_THREADS
    assert gather_args[10] <= bound                        # nthreads
    assert scatter_args[12] <= bound and scatter_args[13] <= bound    # parts, nthreads
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", "torch")
    assert torch.equal(got_g, tdo.gather_nd(x, i))
    assert torch.equal(got_s, tdo.scatter_nd(x, i, u, reduction))


# =============================================================================================
# 2. Tensors whose storage was resized
# =============================================================================================

def _freed(t):
    t.untyped_storage().resize_(0)
    return t


def _strided(t):
    """A non-contiguous view with t's values (every other element of a wider tensor)."""
    wide = torch.zeros(t.shape[:-1] + (2 * t.shape[-1],), dtype=t.dtype)
    wide[..., ::2] = t
    s = wide[..., ::2]
    assert not s.is_contiguous()
    return s


def _operands(layout):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 4, generator=g)
    i = torch.tensor([[1], [6], [-2]])
    u = torch.randn(3, 4, generator=g)
    if layout == "strided":
        x, i, u = _strided(x), _strided(i), _strided(u)
    return x, i, u


def _out(shape, layout):
    o = torch.full(shape, 7.0)
    return _strided(o) if layout == "strided" else o


# (op, role, call(x, i, u, out_or_none), which tensor is freed, the tensor that must stay intact)
_STORAGE_CASES = {
    "gather-input": ("gather_nd", "InputTensor", "x", None),
    "gather-indices": ("gather_nd", "IndicesTensor", "i", None),
    "gather_out-input": ("gather_nd", "InputTensor", "x", "out"),
    "gather_out-indices": ("gather_nd", "IndicesTensor", "i", "out"),
    "gather_out-out": ("gather_nd", "OutputTensor (out)", "out", "out"),
    "scatter-input": ("scatter_nd", "InputTensor", "x", None),
    "scatter-indices": ("scatter_nd", "IndicesTensor", "i", None),
    "scatter-updates": ("scatter_nd", "UpdatesTensor", "u", None),
    "scatter_out-input": ("scatter_nd", "InputTensor", "x", "out"),
    "scatter_out-indices": ("scatter_nd", "IndicesTensor", "i", "out"),
    "scatter_out-updates": ("scatter_nd", "UpdatesTensor", "u", "out"),
    "scatter_out-out": ("scatter_nd", "OutputTensor (out)", "out", "out"),
    "scatter_-input": ("scatter_nd_", "InputTensor", "x", None),
    "scatter_-indices": ("scatter_nd_", "IndicesTensor", "i", "x"),
    "scatter_-updates": ("scatter_nd_", "UpdatesTensor", "u", "x"),
    "top_k1-input": ("top_k1", "InputTensor", "x", None),
}


def _call(op, x, i, u, out, reduction):
    if op == "gather_nd":
        return tdo.gather_nd(x, i, out=out)
    if op == "scatter_nd":
        return tdo.scatter_nd(x, i, u, reduction, out=out)
    if op == "scatter_nd_":
        return tdo.scatter_nd_(x, i, u, reduction)
    return tdo.top_k1(x, 2, 0, "decreasing", torch.int64)     # axis 0: a transposing copy


def _storage_params():
    for case, (op, *_) in _STORAGE_CASES.items():
        for reduction in (["none", "add"] if op.startswith("scatter") else ["none"]):
            yield pytest.param(case, reduction, id=f"{case}-{reduction}")


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("case,reduction", list(_storage_params()))
def test_freed_storage_raises(native, case, reduction, layout):
    """Every tensor a native kernel reads or writes: a RuntimeError naming it (no segfault, no
    garbage), and the caller's out= / in-place target left as it was."""
    op, role, freed, keep = _STORAGE_CASES[case]
    x, i, u = _operands(layout)
    out = None
    if keep == "out" or freed == "out":
        out = _out((3, 4) if op == "gather_nd" else (8, 4), layout)
    tensors = dict(x=x, i=i, u=u, out=out)
    intact = tensors[keep].clone() if keep and keep != freed else None
    t = tensors[freed]
    shape, stride, offset, es = t.shape, t.stride(), t.storage_offset(), t.element_size()
    need = (offset + sum((s - 1) * st for s, st in zip(shape, stride)) + 1) * es
    _freed(t)
    msg = f"{op}: {role}'s storage has 0 bytes but the tensor needs {need} bytes"
    with pytest.raises(RuntimeError, match=re.escape(msg) + r".*was its storage resized\?"):
        _call(op, x, i, u, out, reduction)
    if intact is not None:
        assert torch.equal(tensors[keep], intact)


@pytest.mark.parametrize("op", ["gather_nd", "scatter_nd", "scatter_nd_", "top_k1"])
def test_shrunk_storage_and_offset(native, op):
    """A storage shrunk by one element under a view with a storage offset: the exact byte
    counts (offset included) in the message, and the in-place target untouched."""
    base = torch.arange(40, dtype=torch.float64).reshape(10, 4)
    x = base[2:]                                  # storage offset 8 elements
    i = torch.tensor([[0], [5]])
    u = torch.full((2, 4), -1.0, dtype=torch.float64)
    base.untyped_storage().resize_(39 * 8)
    before = base.untyped_storage().nbytes()
    snapshot = x[:-1].clone()                  # what is still inside the storage
    with pytest.raises(RuntimeError, match=r"InputTensor's storage has 312 bytes but the tensor "
                                           r"needs 320 bytes"):
        _call(op, x, i, u, None, "none")
    assert base.untyped_storage().nbytes() == before
    assert torch.equal(x[:-1], snapshot)


@pytest.mark.parametrize("case", ["gather-input", "gather-indices", "top_k1-input"])
def test_freed_storage_error_type_matches_portable(monkeypatch, case):
    """The portable path raises RuntimeError (torch's setStorage bounds check) on the calls
    where it does not crash inside torch; the native path raises the same type."""
    op, _, freed, _ = _STORAGE_CASES[case]
    types = []
    for backend in ("torch", "native"):
        monkeypatch.setenv("TORCH_DML_OPS_BACKEND", backend)
        x, i, u = _operands("contiguous")
        _freed(dict(x=x, i=i, u=u)[freed])
        with pytest.raises(Exception) as e:
            _call(op, x, i, u, None, "none")
        types.append(type(e.value))
    assert types[0] is types[1] is RuntimeError


@pytest.mark.parametrize("freed", ["i", "u"])
def test_freed_storage_checked_before_delegating(native, freed):
    """A call the native kernels hand to the portable path (float16 with a reduction) is checked
    all the same, and the in-place target stays intact."""
    x = torch.randn(8, 4).half()
    i, u = torch.tensor([[1], [2]]), torch.randn(2, 4).half()
    assert not ngs.scatter_covers(torch.float16, "add")
    before = x.clone()
    _freed(dict(i=i, u=u)[freed])
    role = dict(i="IndicesTensor", u="UpdatesTensor")[freed]
    with pytest.raises(RuntimeError, match=f"scatter_nd_: {role}'s storage has 0 bytes"):
        tdo.scatter_nd_(x, i, u, "add")
    assert torch.equal(x, before)


def test_empty_tensors_need_no_storage(native):
    """A tensor with no elements addresses no byte, whatever its storage."""
    x = torch.randn(8, 4)
    i = _freed(torch.zeros(0, 1, dtype=torch.int64))
    assert tdo.gather_nd(x, i).shape == (0, 4)
    assert torch.equal(tdo.scatter_nd(x, i, _freed(torch.zeros(0, 4))), x)
    xb = _freed(torch.zeros(0, 3, 4))                                 # an empty batch
    assert tdo.gather_nd(xb, torch.zeros(0, 2, 1, dtype=torch.int64), 1).shape == (0, 2, 4)


# =============================================================================================
# 3. uint64 data
# =============================================================================================

def u64(values, shape=None):
    """A uint64 tensor of Python ints in [0, 2**64), built through int64 bits."""
    t = torch.tensor([v - U64 if v >= 1 << 63 else v for v in values], dtype=torch.int64)
    t = t.view(torch.uint64)
    return t.reshape(shape) if shape is not None else t


def u64_list(t):
    """The values of a uint64 tensor as Python ints (row-major)."""
    return [v % U64 for v in t.contiguous().view(torch.int64).reshape(-1).tolist()]


def _u64_values(g, n, pool=None):
    """n values, half of them at or above 2**63, drawn from a small pool when given (ties)."""
    hi = torch.randint(0, 2, (n,), generator=g).tolist()
    lo = torch.randint(0, 2 ** 62 if pool is None else pool, (n,), generator=g).tolist()
    return [(1 << 63) + v if h else v for h, v in zip(hi, lo)]


INDEX_DTYPES = [torch.int64, torch.int32, torch.uint32, torch.uint64]


def _idx(rows, index_dtype, layout):
    i = torch.tensor(rows, dtype=torch.int64).to(index_dtype)
    return _strided(i) if layout == "strided" else i


@pytest.mark.usefixtures("native_only")
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
def test_uint64_gather(index_dtype, layout):
    g = torch.Generator().manual_seed(4)
    vals = _u64_values(g, 6 * 5)
    x = u64(vals, (6, 5))
    tuples = [[5], [0], [3], [3], [1]]
    i = _idx(tuples, index_dtype, layout)
    got = tdo.gather_nd(x, i)
    assert got.dtype == torch.uint64 and got.shape == (5, 5)
    assert u64_list(got) == [vals[r[0] * 5 + c] for r in tuples for c in range(5)]
    out = torch.zeros(5, 5, dtype=torch.uint64)
    tdo.gather_nd(x, i, out=out)
    assert u64_list(out) == u64_list(got)
    i2 = _idx([[5, 4], [0, 0], [2, 3]], index_dtype, layout)          # element gather
    assert u64_list(tdo.gather_nd(x, i2)) == [vals[29], vals[0], vals[13]]


def _scatter_oracle(vals, shape, tuples, upd, reduction):
    out = list(vals)
    width = shape[1]
    for t, (r,) in enumerate(tuples):
        for c in range(width):
            p, s = r * width + c, upd[t * width + c]
            if reduction == "none":
                out[p] = s
            elif reduction == "add":
                out[p] = (out[p] + s) % U64
            elif reduction == "mul":
                out[p] = (out[p] * s) % U64
            elif reduction == "max":
                out[p] = max(out[p], s)
            else:
                out[p] = min(out[p], s)
    return out


@pytest.mark.usefixtures("native_only")
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32, torch.uint64], ids=str)
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_uint64_scatter(reduction, index_dtype, layout):
    """Unsigned wraparound for add/mul, unsigned order for max/min (2**63 + x above 5),
    duplicates in index order; functional, out= and in-place."""
    g = torch.Generator().manual_seed(5)
    shape = (6, 3)
    vals = _u64_values(g, 18)
    vals[:3] = [U64 - 1, 1 << 63, 5]                      # wraps on add, mul; order extremes
    tuples = [[0], [4], [0], [-1 if index_dtype != torch.uint64 else 5], [4], [0]]
    upd = _u64_values(g, 6 * 3)
    upd[:3] = [2, 3, (1 << 63) + 7]
    want = _scatter_oracle(vals, shape, [[r % 6] for (r,) in tuples], upd, reduction)
    x = u64(vals, shape)
    i = _idx(tuples, index_dtype, layout)
    u = u64(upd, (6, 3))
    if layout == "strided":
        x, u = _strided(x), _strided(u)
    assert u64_list(tdo.scatter_nd(x, i, u, reduction)) == want
    assert u64_list(x) == vals                                         # functional: input intact
    out = torch.zeros(shape, dtype=torch.uint64)
    tdo.scatter_nd(x, i, u, reduction, out=out)
    assert u64_list(out) == want
    tdo.scatter_nd_(x, i, u, reduction)
    assert u64_list(x) == want


@pytest.mark.usefixtures("native_only")
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32, torch.uint32], ids=str)
@pytest.mark.parametrize("direction", ["decreasing", "increasing"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_uint64_top_k1(direction, index_dtype, axis):
    """Unsigned order (2**63 + x above every smaller value), ties by lower index first."""
    g = torch.Generator().manual_seed(6)
    rows, n = 4, 90
    vals = _u64_values(g, rows * n, pool=6)                  # few distinct values: many ties
    vals[:4] = [U64 - 1, 0, 1 << 63, (1 << 63) - 1]
    x = u64(vals, (rows, n))
    if axis == 0:
        x = x.t()                                                     # non-contiguous, [n, rows]
    largest = direction == "decreasing"
    for k in (1, 3, 33, n):
        res = tdo.top_k1(x, k, axis, direction, index_dtype)
        assert res.values.dtype == torch.uint64 and res.indices.dtype == index_dtype
        v = u64_list(res.values.movedim(axis, -1))
        i = res.indices.movedim(axis, -1).to(torch.int64).reshape(-1).tolist()
        for r in range(rows):
            want_v, want_i = _topk_oracle(vals[r * n:(r + 1) * n], k, largest)
            assert v[r * k:(r + 1) * k] == want_v
            assert i[r * k:(r + 1) * k] == want_i


@pytest.mark.usefixtures("native_only")
def test_uint64_top_k1_parallel_segments(monkeypatch, num_threads):
    """Rows over threads and rows split into segments (merge of candidates) on uint64 keys."""
    monkeypatch.setattr(_native_topk, "GRAIN", 1)
    monkeypatch.setattr(_native_topk, "SEG_MIN", 16)
    monkeypatch.setattr(_native_topk, "CAP_MIN", 1)
    monkeypatch.setattr(_native, "MAX_THREADS", 8)
    num_threads(8)
    g = torch.Generator().manual_seed(7)
    for rows, n in ((1, 400), (3, 150)):
        vals = _u64_values(g, rows * n, pool=50)
        x = u64(vals, (rows, n))
        for k in (1, 10, 100):
            for largest in (True, False):
                res = tdo.top_k1(x, k, -1, "decreasing" if largest else "increasing")
                for r in range(rows):
                    want_v, want_i = _topk_oracle(vals[r * n:(r + 1) * n], k, largest)
                    assert u64_list(res.values[r]) == want_v
                    assert res.indices[r].tolist() == want_i


@pytest.mark.parametrize("call", ["gather", "none", "add", "mul", "max", "min", "decreasing",
                                  "increasing"])
def test_uint64_native_matches_portable(monkeypatch, call):
    """The native kernels and the portable path agree bit for bit on uint64 (values above
    2**63, duplicates, ties)."""
    g = torch.Generator().manual_seed(8)
    x = u64(_u64_values(g, 8 * 40, pool=4), (8, 40))
    i = torch.randint(-8, 8, (30, 1), generator=g)
    u = u64(_u64_values(g, 30 * 40), (30, 40))

    def run(backend):
        monkeypatch.setenv("TORCH_DML_OPS_BACKEND", backend)
        if call == "gather":
            return (tdo.gather_nd(x, i),)
        if call in ("decreasing", "increasing"):
            return tuple(tdo.top_k1(x, 13, -1, call, torch.int64))
        return (tdo.scatter_nd(x, i, u, call),)
    for a, b in zip(run("torch"), run("native")):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.view(torch.int64), b.view(torch.int64))
