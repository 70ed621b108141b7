"""The portable path as it runs on CUDA (the Triton kernels hand it the calls they do not
cover), on CPU tensors: ``torch_checks_bounds`` says False, as it does for a CUDA tensor.

On CUDA torch's indexing kernels fail a device-side assert on an out-of-range index, so the
portable path must raise the IndexError before calling any of them; and CUDA's
``scatter_reduce_(..., "prod")`` has no deterministic implementation, so deterministic mul takes
the ordered product.
"""
import pytest
import torch

import torch_dml_ops as tdo
from reference import to_bits, top_k1_ref


@pytest.fixture
def as_on_cuda(monkeypatch):
    from torch_dml_ops.portable import gather_nd as pg, scatter_nd as ps
    for mod in (pg, ps):
        monkeypatch.setattr(mod, "torch_checks_bounds", lambda t: False, raising=False)


def _record_calls(monkeypatch, calls, owner, names):
    """Wrap ``owner.<name>`` for each name so that every call appends the name to ``calls``."""
    for name in names:
        real = getattr(owner, name)

        def wrapper(*args, __real=real, __name=name, **kwargs):
            calls.append(__name)
            return __real(*args, **kwargs)
        monkeypatch.setattr(owner, name, wrapper)


@pytest.fixture
def index_ops(monkeypatch):
    """The torch indexing ops called (the ones that assert on CUDA), by name."""
    calls = []
    _record_calls(monkeypatch, calls, torch.Tensor,
                  ("index_put_", "index_select", "index_copy_", "index_add_", "scatter_reduce_",
                   "index_reduce_", "take"))
    _record_calls(monkeypatch, calls, torch, ("index_select", "take"))
    real_getitem = torch.Tensor.__getitem__

    def getitem(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        if any(isinstance(k, torch.Tensor) for k in keys):
            calls.append("__getitem__")
        return real_getitem(self, key)
    monkeypatch.setattr(torch.Tensor, "__getitem__", getitem)
    return calls


def _idx(n, size0, size1, bad, negative=True):
    low = -size1 if negative else 0
    idx = torch.stack([torch.randint(0, size0, (n,)), torch.randint(low, size1, (n,))], 1)
    if bad:
        idx[n // 2, 0] = size0          # column 0's upper bound: what take/index_select check
    return idx


CASES = {
    # gather: the small advanced-indexing call, a strided input, the delegated index_select/take
    "gather_small": lambda bad: tdo.gather_nd(torch.randn(6, 5, 3), _idx(4, 6, 5, bad)),
    "gather_strided": lambda bad: tdo.gather_nd(torch.randn(3, 5, 6).permute(2, 1, 0),
                                                _idx(4, 6, 5, bad)),
    # (no negative index, column 0 smaller than column 1: on CPU its bound is left to the
    # kernel)
    "gather_rows": lambda bad: tdo.gather_nd(torch.randn(50, 60, 3), _idx(3000, 50, 60, bad, False)),
    "gather_take": lambda bad: tdo.gather_nd(torch.randn(50, 60), _idx(3000, 50, 60, bad, False)),
    # scatter: the small index_put_ (fp16 add, as Triton hands it over), the row scatters
    "scatter_small_f16_add": lambda bad: tdo.scatter_nd(
        torch.randn(6, 5, 3).half(), _idx(4, 6, 5, bad), torch.randn(4, 3).half(), "add"),
    "scatter_rows_mul": lambda bad: tdo.scatter_nd(
        torch.randn(60, 50, 8), _idx(3000, 60, 50, bad), torch.randn(3000, 8), "mul"),
    "scatter_uint16_max": lambda bad: tdo.scatter_nd(
        torch.randint(0, 1000, (6, 5, 3)).to(torch.uint16), _idx(4, 6, 5, bad),
        torch.randint(0, 1000, (4, 3)).to(torch.uint16), "max"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_index_is_an_index_error_before_any_indexing_op(backend, as_on_cuda, index_ops,
                                                            name):
    backend("torch")
    with pytest.raises(IndexError):
        CASES[name](True)
    assert index_ops == []


@pytest.mark.parametrize("name", list(CASES))
def test_results_unchanged_when_checked_first(backend, monkeypatch, name):
    backend("torch")
    torch.manual_seed(1)
    want = CASES[name](False)
    from torch_dml_ops.portable import gather_nd as pg, scatter_nd as ps
    for mod in (pg, ps):
        monkeypatch.setattr(mod, "torch_checks_bounds", lambda t: False, raising=False)
    torch.manual_seed(1)
    got = CASES[name](False)
    assert torch.equal(got.view(torch.int16) if got.dtype == torch.uint16 else got,
                       want.view(torch.int16) if want.dtype == torch.uint16 else want)


def test_failing_in_place_scatter_modifies_nothing(backend, as_on_cuda, index_ops):
    backend("torch")
    x = torch.randn(6, 5, 3).half()
    before = x.clone()
    with pytest.raises(IndexError):
        tdo.scatter_nd_(x, _idx(4, 6, 5, True), torch.randn(4, 3).half(), "add")
    assert torch.equal(x, before) and index_ops == []


def _sequential_mul(x, idx, upd):
    out = x.clone()
    for t in range(idx.shape[0]):
        i, j = (int(v) for v in idx[t])
        out[i, j] = out[i, j] * upd[t]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32])
def test_deterministic_mul_takes_the_ordered_product(backend, as_on_cuda, index_ops,
                                                     deterministic, dtype):
    backend("torch")
    x = (torch.rand(7, 5, 4) + 0.5).to(dtype) if dtype.is_floating_point else \
        torch.randint(-3, 4, (7, 5, 4), dtype=dtype)
    idx = _idx(300, 7, 5, False)          # many duplicates per row
    upd = (torch.rand(300, 4) + 0.5).to(dtype) if dtype.is_floating_point else \
        torch.randint(-2, 3, (300, 4), dtype=dtype)
    got = tdo.scatter_nd(x, idx, upd, "mul")
    assert "scatter_reduce_" not in index_ops
    assert torch.equal(got, _sequential_mul(x, idx, upd))


def test_deterministic_mul_backward(backend, as_on_cuda, deterministic):
    backend("torch")
    x = (torch.rand(4, 3, 2, dtype=torch.float64) + 0.5).requires_grad_()
    u = (torch.rand(20, 2, dtype=torch.float64) + 0.5).requires_grad_()
    idx = _idx(20, 4, 3, False)
    assert torch.autograd.gradcheck(lambda a, b: tdo.scatter_nd(a, idx, b, "mul"), (x, u))


def test_overwrite_duplicates_never_reach_index_put(backend, as_on_cuda, index_ops):
    """A small "none" scatter with duplicate slices: on the CPU one ``index_put_`` keeps the
    last duplicate (it runs in index order); CUDA's keeps any one and may mix two rows, so
    there the claim pass resolves them (the last in index order wins)."""
    backend("torch")
    x = torch.zeros(3, 8)
    idx = torch.tensor([[0], [1], [0], [2], [0], [1]])
    upd = torch.arange(48.0).reshape(6, 8)
    got = tdo.scatter_nd(x, idx, upd)
    assert "index_put_" not in index_ops
    assert torch.equal(got, upd[[4, 5, 3]])


def _sequential_add(x, idx, upd, wide=False):
    """The CPU's order: each row's updates added in index order, rounded per add (``wide``:
    accumulated in float32 and rounded once, the one rule of a float16/bfloat16 add)."""
    out = x.float().clone() if wide else x.clone()
    for t in range(idx.shape[0]):
        i, j = (int(v) for v in idx[t])
        out[i, j] = out[i, j] + (upd[t].float() if wide else upd[t])
    return out.to(x.dtype)


@pytest.mark.parametrize("dtype,n", [(torch.float32, 300), (torch.float16, 300),
                                     (torch.bfloat16, 300), (torch.float16, 5000),
                                     (torch.float16, 4000)])
def test_deterministic_float_add_in_index_order(backend, as_on_cuda, index_ops, deterministic,
                                                monkeypatch, dtype, n):
    """Deterministic mode: CUDA's index_add_ sums duplicates in its own order, so float add
    takes the ordered rounds, bit for bit the CPU's sums (float16/bfloat16 summed in float32
    and rounded once, whatever the number of updates, as the CPU does)."""
    from torch_dml_ops.portable import gather_nd as pg, scatter_nd as ps
    backend("torch")
    g = torch.Generator().manual_seed(n)
    x = torch.randn(7, 5, 4, generator=g).to(dtype)
    idx = _idx(n, 7, 5, False)
    upd = (torch.randn(n, 4, generator=g) * 100).to(dtype)
    got = tdo.scatter_nd(x, idx, upd, "add")
    assert "index_add_" not in index_ops and "index_put_" not in index_ops
    wide = dtype.itemsize == 2
    assert torch.equal(got.view(torch.int8), _sequential_add(x, idx, upd, wide).view(torch.int8))
    monkeypatch.undo()                      # the CPU's own path (index_put_ / index_add_)
    cpu = tdo.scatter_nd(x, idx, upd, "add")
    assert torch.equal(got.view(torch.int8), cpu.view(torch.int8))
    # check_indices=False with out-of-range tuples: the in-range ones' sums, rounded as the
    # CPU rounds them
    bad = torch.cat([idx, torch.tensor([[7, 0]] * (n // 10))])
    ubad = torch.cat([upd, upd[: n // 10]])
    cpu = tdo.scatter_nd(x, bad, ubad, "add", check_indices=False)
    for mod in (pg, ps):
        monkeypatch.setattr(mod, "torch_checks_bounds", lambda t: False, raising=False)
    got = tdo.scatter_nd(x, bad, ubad, "add", check_indices=False)
    assert torch.equal(got.view(torch.int8), cpu.view(torch.int8))


@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_deterministic_float_max_min_keep_the_cpus_zero_and_nan(backend, as_on_cuda, index_ops,
                                                               deterministic, monkeypatch,
                                                               dtype, reduction):
    """Deterministic mode: CUDA's scatter_reduce_ amax/amin keep whichever of -0.0 and 0.0 (or
    of two NaNs) lands first, so float max/min take the ordered rounds with the CPU's rule (a
    tie keeps the row's value, a NaN update wins): the CPU's bits."""
    backend("torch")
    nan = float("nan")
    g = torch.Generator().manual_seed(2)
    vals = torch.tensor([0.0, -0.0, nan, -nan, 1.0, -1.0])
    x = vals[torch.randint(0, 6, (4, 3, 2), generator=g)].to(dtype)
    idx = _idx(60, 4, 3, False)
    upd = vals[torch.randint(0, 6, (60, 2), generator=g)].to(dtype)
    got = tdo.scatter_nd(x, idx, upd, reduction)
    assert "scatter_reduce_" not in index_ops
    monkeypatch.undo()
    cpu = tdo.scatter_nd(x, idx, upd, reduction)
    assert torch.equal(got.view(torch.int8), cpu.view(torch.int8))


def _sort_by_bits(real_sort):
    """``torch.sort`` as CUDA's radix sort orders floats: -NaN below NaN, -0.0 below 0.0 (ties
    on the CPU)."""
    def sort(t, dim=-1, descending=False, stable=False, **kw):
        if not t.is_floating_point():
            return real_sort(t, dim=dim, descending=descending, stable=stable, **kw)
        d, sign = t.double(), torch.signbit(t)
        big, tiny = torch.full_like(d, 1e300), torch.full_like(d, 1e-300)
        key = torch.where(torch.isnan(d), torch.where(sign, big, 2 * big),
                          torch.where(d == 0, torch.where(sign, -tiny, tiny), d))
        p = real_sort(key, dim=dim, descending=descending, stable=True).indices
        return torch.return_types.sort((t.gather(dim, p), p))
    return sort


@pytest.mark.parametrize("direction", ["decreasing", "increasing"])
def test_top_k_ties_ignore_the_sign_of_nan_and_zero(backend, monkeypatch, direction):
    """NaNs tie with NaNs and -0.0 with 0.0 whatever the sort underneath orders by (CUDA's
    orders by sign): the lower index first, as on the CPU."""
    backend("torch")
    nan = float("nan")
    x = torch.tensor([0.0, nan, -0.0, 1.0, -nan, 0.0, -1.0, -0.0, nan] * 3)
    want = [top_k1_ref(x, k, 0, direction == "decreasing") for k in (3, 9, 27)]
    monkeypatch.setattr(torch, "sort", _sort_by_bits(torch.sort))
    for k, (bits, idx) in zip((3, 9, 27), want):
        got = tdo.top_k1(x, k, 0, direction)
        assert got.indices.tolist() == idx.tolist(), k
        assert to_bits(got.values).tolist() == bits.tolist(), k


@pytest.fixture
def host_reads(monkeypatch):
    """Every host read of tensor data and host-to-device tensor construction: what a CUDA graph
    cannot capture (``.item()``, ``.tolist()``, ``bool()``/``int()`` of a tensor, ``nonzero``,
    ``torch.tensor``)."""
    events = []
    _record_calls(monkeypatch, events, torch.Tensor,
                  ("item", "tolist", "__bool__", "__int__", "__index__", "nonzero", "cpu"))
    _record_calls(monkeypatch, events, torch, ("tensor", "as_tensor", "nonzero"))
    return events


def _bad_tuples(n, sizes, dtype=torch.int64, seed=0):
    """Tuples in range (negative ones too for signed types) with every third one out of range,
    by one size, below the negative range, or (unsigned) huge."""
    g = torch.Generator().manual_seed(seed)
    signed = dtype in (torch.int64, torch.int32)
    cols = [torch.randint(-s if signed else 0, s, (n,), generator=g) for s in sizes]
    idx = torch.stack(cols, 1)
    idx[::3, -1] = sizes[-1]
    if signed:
        idx[1::6, 0] = -sizes[0] - 1
    out = idx.to(dtype)
    if dtype == torch.uint64:
        out.view(torch.int64)[2::6, 0] = -5       # 2**64 - 5
    return out


UNCHECKED = {
    "gather_small": lambda: tdo.gather_nd(torch.randn(6, 5, 3), _bad_tuples(7, (6, 5)),
                                          check_indices=False),
    "gather_rows_uint64": lambda: tdo.gather_nd(torch.randn(50, 60, 3),
                                                _bad_tuples(3000, (50, 60), torch.uint64),
                                                check_indices=False),
    "gather_take_int32": lambda: tdo.gather_nd(torch.randn(50, 60),
                                               _bad_tuples(3000, (50, 60), torch.int32),
                                               check_indices=False),
    "gather_strided_batch": lambda: tdo.gather_nd(
        torch.randn(3, 6, 5, 4).transpose(1, 3), _bad_tuples(3 * 8, (4, 5)).view(3, 8, 2), 1,
        check_indices=False),
    "scatter_f16_add": lambda: tdo.scatter_nd(torch.randn(6, 5, 3).half(), _bad_tuples(9, (6, 5)),
                                              torch.randn(9, 3).half(), "add",
                                              check_indices=False),
    "scatter_f32_add_negzero": lambda: tdo.scatter_nd(
        torch.full((4, 3), -0.0), _bad_tuples(30, (4,)), torch.full((30, 3), -0.0), "add",
        check_indices=False),
    "scatter_rows_mul": lambda: tdo.scatter_nd(torch.randn(60, 50, 8), _bad_tuples(3000, (60, 50)),
                                               torch.randn(3000, 8), "mul", check_indices=False),
    "scatter_f32_max_nan": lambda: tdo.scatter_nd(
        torch.randn(2, 2).index_fill_(1, torch.arange(1), float("nan")), _bad_tuples(6, (2, 2)),
        torch.randn(6), "max", check_indices=False),
    "scatter_uint16_max": lambda: tdo.scatter_nd(
        torch.randint(0, 60000, (6, 5, 3)).to(torch.uint16), _bad_tuples(9, (6, 5)),
        torch.randint(0, 60000, (9, 3)).to(torch.uint16), "max", check_indices=False),
    "scatter_uint64_min": lambda: tdo.scatter_nd(
        torch.randint(0, 2**62, (6, 5)).to(torch.uint64), _bad_tuples(9, (6, 5), torch.uint64),
        torch.randint(0, 2**62, (9,)).to(torch.uint64), "min", check_indices=False),
    "scatter_int8_min": lambda: tdo.scatter_nd(
        torch.randint(-100, 100, (6, 5), dtype=torch.int8), _bad_tuples(9, (6, 5)),
        torch.randint(-100, 100, (9,), dtype=torch.int8), "min", check_indices=False),
    "scatter_bool_add": lambda: tdo.scatter_nd(
        torch.zeros(6, 5, dtype=torch.bool), _bad_tuples(9, (6, 5)),
        torch.ones(9, dtype=torch.bool), "add", check_indices=False),
    "scatter_bool_mul": lambda: tdo.scatter_nd(
        torch.ones(6, 5, dtype=torch.bool), _bad_tuples(9, (6, 5)),
        torch.zeros(9, dtype=torch.bool), "mul", check_indices=False),
    "scatter_in_place_add": lambda: tdo.scatter_nd_(torch.randn(6, 5, 3).bfloat16(),
                                                    _bad_tuples(9, (6, 5)),
                                                    torch.randn(9, 3).bfloat16(), "add",
                                                    check_indices=False),
}


def _bits(t):
    return t.view(torch.int8) if t.dtype == torch.bool else \
        t.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


@pytest.mark.parametrize("name", list(UNCHECKED))
def test_unchecked_calls_read_nothing_on_the_host(backend, monkeypatch, host_reads, name):
    """check_indices=False where torch's index kernels assert (CUDA): out-of-range tuples are
    masked on the device (a gather reads row 0 and zeroes the slice; a reduction sends the
    reduction's identity to row 0), so nothing is read on the host and the call can be
    captured in a CUDA graph; the result is the CPU's (which skips the tuples), bit for bit."""
    backend("torch")
    torch.manual_seed(2)
    want = UNCHECKED[name]()
    host_reads.clear()
    from torch_dml_ops.portable import gather_nd as pg, scatter_nd as ps
    for mod in (pg, ps):
        monkeypatch.setattr(mod, "torch_checks_bounds", lambda t: False, raising=False)
    torch.manual_seed(2)
    got = UNCHECKED[name]()
    assert host_reads == []
    assert got.dtype == want.dtype and torch.equal(_bits(got), _bits(want))


def test_unchecked_deterministic_mul_reads_the_host_once(backend, as_on_cuda, host_reads,
                                                         deterministic):
    """The one exception: the ordered product (deterministic mul on CUDA) reads its round
    sizes once; out-of-range tuples still only multiply row 0 by 1."""
    backend("torch")
    x = torch.rand(7, 5, 4, dtype=torch.float64) + 0.5
    idx = _bad_tuples(300, (7, 5))
    upd = torch.rand(300, 4, dtype=torch.float64) + 0.5
    host_reads.clear()
    got = tdo.scatter_nd(x, idx, upd, "mul", check_indices=False)
    assert host_reads == ["tolist"]
    keep = ((idx >= -torch.tensor([7, 5])) & (idx < torch.tensor([7, 5]))).all(1)
    assert torch.equal(got, _sequential_mul(x, idx[keep] % torch.tensor([7, 5]), upd[keep]))
