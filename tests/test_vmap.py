"""torch.vmap: batching rules (no per-sample fallback loop), equal to a Python loop of calls."""
import warnings

import pytest
import torch

import torch_dml_ops as tdo
from helpers import INDEX_DTYPES, make_indices


@pytest.fixture(autouse=True)
def no_fallback_warning():
    """torch warns when it falls back to a per-sample loop: a missing batching rule fails here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*batching rule.*")
        yield


def loop(fn, args, in_dims, size):
    outs = []
    for j in range(size):
        a = [t.select(d, j) if d is not None else t for t, d in zip(args, in_dims)]
        outs.append(fn(*a))
    if isinstance(outs[0], tuple):
        return tuple(torch.stack(o) for o in zip(*outs))
    return torch.stack(outs)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("in_dims", [(0, 0), (None, 0), (2, None), (1, 1)])
def test_gather_nd_vmap(in_dims, index_dtype):
    x = torch.randn(4, 5, 6)
    size = {(0, 0): 4, (None, 0): 3, (2, None): 6, (1, 1): 5}[in_dims]
    logical_x = x.select(in_dims[0], 0) if in_dims[0] is not None else x
    prefix = (size, 2) if in_dims[1] is not None else (2,)
    i = make_indices(prefix, logical_x.shape[:1], index_dtype, negative=True)
    if in_dims[1] == 1:
        i = i.transpose(0, 1)
    fn = lambda a, b: tdo.gather_nd(a, b)
    assert torch.equal(torch.vmap(fn, in_dims=in_dims)(x, i), loop(fn, (x, i), in_dims, size))


def test_gather_nd_vmap_batch_dims_grad_and_errors():
    x = torch.randn(3, 2, 5, 4, dtype=torch.float64, requires_grad=True)
    i = make_indices((3, 2, 7), (5,), torch.int64, negative=True)
    fn = lambda a, b: tdo.gather_nd(a, b, 1)
    got = torch.vmap(fn)(x, i)
    assert torch.equal(got, loop(fn, (x, i), (0, 0), 3))
    (g1,) = torch.autograd.grad(got.pow(2).sum(), x)
    (g2,) = torch.autograd.grad(loop(fn, (x, i), (0, 0), 3).pow(2).sum(), x)
    assert torch.equal(g1, g2)
    with pytest.raises(IndexError, match="out of range"):
        torch.vmap(fn)(x.detach(), i + 5)


@pytest.mark.parametrize("in_dims", [(0, 0), (0, None), (None, 0)])
def test_vmap_dml_form_matches_a_loop(in_dims):
    x = torch.randn(3, 1, 5, 4, dtype=torch.float64)             # per sample [1, 5, 4]
    i = torch.randint(-5, 5, (3, 1, 6, 1))                        # per sample [1, 6, 1]
    u = torch.randn(3, 1, 6, 4, dtype=torch.float64)
    xs = x if in_dims[0] == 0 else x[0]
    isx = i if in_dims[1] == 0 else i[0]
    kw = dict(input_dimension_count=2, indices_dimension_count=2)
    g = lambda a, b: tdo.gather_nd(a, b, **kw)  # noqa: E731
    assert torch.equal(torch.vmap(g, in_dims)(xs, isx), loop(g, (xs, isx), in_dims, 3))
    s = lambda a, b, c: tdo.scatter_nd(a, b, c, "add", **kw)  # noqa: E731
    dims3 = in_dims + (0,)
    assert torch.equal(torch.vmap(s, dims3)(xs, isx, u), loop(s, (xs, isx, u), dims3, 3))


def test_vmap_checks_the_per_sample_shapes_against_the_feature_level():
    x = torch.randn(5, 1, 1, 3, 4)                        # per sample: 4-D, valid at 2_1
    i = torch.zeros(5, 2, 1, dtype=torch.uint32)
    with tdo.feature_level("2_1"):
        torch.vmap(tdo.gather_nd)(x, i)
        torch.vmap(lambda t: tdo.top_k1(t, 2, index_dtype=torch.uint32))(x)
        with pytest.raises(tdo.ConstraintError, match="index type"):
            torch.vmap(tdo.gather_nd)(x, i.long())


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("in_dims", [(0, 0, 0), (None, 0, 0), (0, None, 0), (0, 0, None)])
def test_scatter_nd_vmap(in_dims, reduction, deterministic):
    b = 4
    x = torch.randn(b, 6, 3) if in_dims[0] is not None else torch.randn(6, 3)
    i = torch.randint(-6, 6, (b, 5, 1)) if in_dims[1] is not None else torch.randint(-6, 6, (5, 1))
    u = torch.randn(b, 5, 3) if in_dims[2] is not None else torch.randn(5, 3)
    fn = lambda a, c, d: tdo.scatter_nd(a, c, d, reduction)
    got = torch.vmap(fn, in_dims=in_dims)(x, i, u)
    want = loop(fn, (x, i, u), in_dims, b)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    if reduction in ("none", "max", "min"):
        assert torch.equal(got, want)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("in_dims", [(0, 0, 0), (None, 0, 0), (0, None, 0), (0, 0, None)])
def test_scatter_nd_vmap_tuple_size_0(in_dims, reduction, deterministic):
    """k = 0 per sample (each update covers the whole sample): the batch coordinate becomes
    the whole tuple."""
    b = 3
    x = torch.randn(b, 4, 2) if in_dims[0] is not None else torch.randn(4, 2)
    i = torch.zeros((b, 5, 0) if in_dims[1] is not None else (5, 0), dtype=torch.int64)
    u = torch.randn(b, 5, 4, 2) if in_dims[2] is not None else torch.randn(5, 4, 2)
    fn = lambda a, c, d: tdo.scatter_nd(a, c, d, reduction)   # noqa: E731
    assert torch.equal(torch.vmap(fn, in_dims=in_dims)(x, i, u), loop(fn, (x, i, u), in_dims, b))


def test_scatter_nd_vmap_unsigned_indices_and_grad():
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    u = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    i = torch.tensor([[[5], [0]], [[1], [2]], [[3], [4]]], dtype=torch.uint32)
    fn = lambda a, c, d: tdo.scatter_nd(a, c, d)
    got = torch.vmap(fn)(x, i, u)
    assert torch.equal(got, loop(fn, (x, i, u), (0, 0, 0), 3))
    w = torch.randn(3, 6, dtype=torch.float64)
    g1 = torch.autograd.grad((got * w).sum(), (x, u))
    g2 = torch.autograd.grad((loop(fn, (x, i, u), (0, 0, 0), 3) * w).sum(), (x, u))
    assert torch.equal(g1[0], g2[0]) and torch.equal(g1[1], g2[1])


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
@pytest.mark.parametrize("in_dim", [0, 1, 2])
def test_top_k1_vmap(in_dim, axis):
    x = torch.randint(0, 4, (3, 5, 6)).float()
    fn = lambda t: tdo.top_k1(t, 2, axis, "increasing")
    got = torch.vmap(fn, in_dims=in_dim)(x)
    want = loop(fn, (x,), (in_dim,), x.shape[in_dim])
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_torch_func_grad():
    x = torch.randn(4, 3)
    g = torch.func.grad(lambda a: tdo.gather_nd(a, torch.tensor([[1], [1]])).sum())(x)
    assert torch.equal(g, torch.zeros(4, 3).index_fill_(0, torch.tensor([1]), 2.0))
