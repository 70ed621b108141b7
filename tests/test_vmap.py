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


# --- scatter_nd_ (in place) under vmap: a batching rule, equal to a per-sample loop -----------

def _physical(t, d):
    """``t`` with its batch at dim ``d`` (a non-contiguous physical layout for d > 0)."""
    return t if d is None or d == 0 else t.movedim(0, d).contiguous()


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("in_dims", [(0, 0, 0), (0, None, 0), (0, 0, None), (0, None, None),
                                     (1, 0, 1), (2, None, 1), (1, 1, None)])
def test_scatter_nd_inplace_vmap_matches_a_loop(in_dims, reduction, deterministic):
    g = torch.Generator().manual_seed(1)
    b = 4
    x0 = torch.randn(b, 6, 3, generator=g, dtype=torch.float64)
    i0 = torch.randint(-6, 6, (b, 5, 1), generator=g)          # duplicates within a sample
    u0 = torch.randn(b, 5, 3, generator=g, dtype=torch.float64)
    x = _physical(x0, in_dims[0])
    i = _physical(i0, in_dims[1]) if in_dims[1] is not None else i0[0]
    u = _physical(u0, in_dims[2]) if in_dims[2] is not None else u0[0]
    fn = lambda a, c, d: tdo.scatter_nd_(a, c, d, reduction)  # noqa: E731
    want = x.clone()
    loop(fn, (want, i, u), in_dims, b)
    got = torch.vmap(fn, in_dims=in_dims, out_dims=in_dims[0])(x, i, u)
    assert torch.equal(x, want)                 # written in place, bit for bit
    assert torch.equal(got, want)               # and returned (the target itself)


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd_inplace_vmap_into_views_elements_and_dml_form(reduction):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 8, 4, generator=g)
    i = torch.randint(0, 4, (3, 5, 2), generator=g)
    u = torch.randn(3, 5, generator=g)
    # a per-sample strided view as the target (writes land in x), element scatters (k = 2)
    fn = lambda a, c, d: tdo.scatter_nd_(a[::2], c, d, reduction)  # noqa: E731
    want = x.clone()
    loop(fn, (want, i, u), (0, 0, 0), 3)
    torch.vmap(fn)(x, i, u)
    assert torch.equal(x, want)
    # DML form: per sample [1, 5, 4], indices [1, 6, 1], updates [1, 6, 4]
    x = torch.randn(3, 1, 5, 4, generator=g)
    i = torch.randint(-5, 5, (3, 1, 6, 1), generator=g)
    u = torch.randn(3, 1, 6, 4, generator=g)
    kw = dict(input_dimension_count=2, indices_dimension_count=2)
    fn = lambda a, c, d: tdo.scatter_nd_(a, c, d, reduction, **kw)  # noqa: E731
    want = x.clone()
    loop(fn, (want, i, u), (0, 0, 0), 3)
    torch.vmap(fn)(x, i, u)
    assert torch.equal(x, want)


def test_scatter_nd_inplace_vmap_through_torch_ops_and_nested():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 6, generator=g)
    i = torch.randint(0, 6, (2, 3, 4, 1), generator=g)
    u = torch.randn(2, 3, 4, generator=g)
    want = x.clone()
    for a in range(2):
        for c in range(3):
            tdo.scatter_nd_(want[a, c], i[a, c], u[a, c], "add")
    op = torch.ops.torch_dml_ops.scatter_nd_
    got = x.clone()
    fn = lambda a, c, d: op(a, c, d, "add")  # noqa: E731      (returns None)
    assert torch.vmap(fn, out_dims=None)(got[0], i[0], u[0]) is None
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], x[1])
    got = x.clone()
    torch.vmap(torch.vmap(fn, out_dims=None), out_dims=None)(got, i, u)
    assert torch.equal(got, want)


def test_scatter_nd_inplace_vmap_under_autograd():
    """Autograd outside vmap records the batched write (the loop's gradients, bit for bit)."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 6, 2, generator=g, dtype=torch.float64, requires_grad=True)
    u = torch.randn(3, 4, 2, generator=g, dtype=torch.float64, requires_grad=True)
    i = torch.tensor([[[1], [4], [1], [0]], [[5], [5], [2], [3]], [[0], [1], [2], [3]]])
    w = torch.randn(3, 6, 2, generator=g, dtype=torch.float64)
    for reduction in ("none", "add", "mul", "max"):
        fn = lambda a, c, d: tdo.scatter_nd_(a, c, d, reduction)  # noqa: E731
        y = x * 2
        torch.vmap(fn)(y, i, u)
        g1 = torch.autograd.grad((y * w).sum(), (x, u))
        # the oracle: the functional op per sample (a loop of in-place writes into slices of
        # one tensor cannot record mul/max: each write bumps the version the previous saved)
        y2 = loop(lambda a, c, d: tdo.scatter_nd(a, c, d, reduction), (x * 2, i, u),
                  (0, 0, 0), 3)
        g2 = torch.autograd.grad((y2 * w).sum(), (x, u))
        assert torch.equal(y, y2) and torch.equal(g1[0], g2[0]) and torch.equal(g1[1], g2[1])
    # torch.func.grad outside vmap too
    for reduction in ("none", "mul"):
        f = lambda op: lambda uu: (torch.vmap(lambda a, c, d: op(a, c, d, reduction))(  # noqa
            x.detach() * 2, i, uu) * w).sum()
        assert torch.equal(torch.func.grad(f(tdo.scatter_nd_))(u.detach()),
                           torch.func.grad(f(tdo.scatter_nd))(u.detach()))
    with pytest.raises(RuntimeError, match="InputTensor is a leaf Variable that requires grad"):
        torch.vmap(lambda a, c, d: tdo.scatter_nd_(a, c, d))(x, i, u)


def test_scatter_nd_inplace_vmap_refuses_an_unbatched_target():
    """Every sample would write into the same tensor: refused, as torch refuses index_copy_."""
    x = torch.zeros(6, 2)
    i = torch.randint(0, 6, (3, 4, 1))
    u = torch.randn(3, 4, 2)
    for fn in (lambda a, c, d: tdo.scatter_nd_(a, c, d),
               lambda a, c, d: torch.ops.torch_dml_ops.scatter_nd_(a, c, d)):
        with pytest.raises(RuntimeError, match=r"scatter_nd_: under torch.vmap, InputTensor \(the "
                           r"in-place target\) is not vmapped while IndicesTensor, UpdatesTensor "
                           r"are"):
            torch.vmap(fn, in_dims=(None, 0, 0))(x, i, u)
    assert not x.any()


def test_out_overloads_under_vmap_refused_as_torch_refuses_its_own():
    """torch's out= ops have no batching rule and no fallback under vmap (index_select(out=)
    raises); the out= forms here raise the same error, naming the overload."""
    x, i = torch.randn(3, 6, 2), torch.randint(0, 6, (3, 4, 1))
    out = torch.empty(3, 4, 2)
    with pytest.raises(RuntimeError) as theirs:
        torch.vmap(lambda a, c, o: torch.index_select(a, 0, c[:, 0], out=o))(x, i, out)
    assert "the fallback path doesn't work on out= or view ops" in str(theirs.value)
    calls = {"gather_nd_out": (lambda a, c, o: tdo.gather_nd(a, c, out=o), out),
             "scatter_nd_out": (lambda a, c, o: tdo.scatter_nd(a, c, out=o, updates=o[:4]),
                                torch.empty(3, 6, 2))}
    for name, (fn, o) in calls.items():
        want = str(theirs.value).replace("aten::index_select.out", f"torch_dml_ops::{name}")
        for in_dims in ((0, 0, 0), (0, 0, None)):
            with pytest.raises(RuntimeError) as ours:
                torch.vmap(fn, in_dims=in_dims)(x, i, o if in_dims[2] == 0 else o[0])
            assert str(ours.value) == want
