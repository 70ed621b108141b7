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


@pytest.fixture
def as_on_cuda(monkeypatch):
    from torch_dml_ops.portable import gather_nd as pg, scatter_nd as ps
    for mod in (pg, ps):
        monkeypatch.setattr(mod, "torch_checks_bounds", lambda t: False, raising=False)


@pytest.fixture
def index_ops(monkeypatch):
    """The torch indexing ops called (the ones that assert on CUDA), by name."""
    calls = []

    def spy(owner, name):
        real = getattr(owner, name)

        def wrapper(*args, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)
        monkeypatch.setattr(owner, name, wrapper)

    for name in ("index_put_", "index_select", "index_copy_", "index_add_", "scatter_reduce_",
                 "index_reduce_", "take"):
        spy(torch.Tensor, name)
    for name in ("index_select", "take"):
        spy(torch, name)
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
