"""scatter_nd: semantics against the loop oracle, reductions, duplicates, in-place, out=,
autograd, opcheck, compile, export."""
import numpy as np
import pytest
import torch

import torch_dml_ops as tdo
from conftest import NATIVE_OK, backend_param
from helpers import (DATA_DTYPES, INDEX_DTYPES, SPLIT_ROW_BYTES, make_data, make_indices,
                     split_rows)
from reference import SCATTER_ND_EXAMPLE, scatter_nd_ref, to_bits

scatter_op = torch.ops.torch_dml_ops.scatter_nd
REDUCTIONS = ["none", "add", "mul", "max", "min"]


@pytest.fixture(params=["small", "large", backend_param("native")])
def portable_path(request, backend, monkeypatch):
    """The native kernels and both strategies of the portable path: one index_put_ for small scatters, and checked
    linearize + claim/index_copy_/index_add_/scatter_reduce_ for large ones."""
    from torch_dml_ops.portable import scatter_nd as portable_scatter
    # small/large: the portable path forced (the C++ kernels would take every CPU call);
    # native: the same test through the C++ kernels.
    backend("native" if request.param == "native" else "torch")
    if request.param == "large":
        monkeypatch.setattr(portable_scatter, "SMALL_SCATTER", -1)
    return request.param


def assert_same(actual, expected, exact=True):
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    if exact or not actual.dtype.is_floating_point:
        np.testing.assert_array_equal(to_bits(actual), to_bits(expected))
    else:
        tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2}.get(actual.dtype, 1e-6)
        torch.testing.assert_close(actual, expected, rtol=tol, atol=tol, equal_nan=True)


def unique_indices(prefix, sizes, dtype, negative=True, generator=None):
    """In-range tuples without duplicates (a random permutation of the index space)."""
    n = int(np.prod(prefix)) if prefix else 1
    total = int(np.prod(sizes))
    assert n <= total
    flat = torch.randperm(total, generator=generator)[:n]
    cols = []
    for s in reversed(sizes):
        cols.append(flat % s)
        flat = flat // s
    idx = torch.stack(cols[::-1], -1).reshape(tuple(prefix) + (len(sizes),))
    if negative and dtype in (torch.int64, torch.int32):
        sz = torch.tensor(sizes)
        flip = torch.randint(0, 2, idx.shape, generator=generator).bool()
        idx = torch.where(flip, idx - sz, idx)
    return idx.to(dtype)


def make_updates(x, i, generator=None):
    k = i.shape[-1]
    return make_data(tuple(i.shape[:-1]) + tuple(x.shape[k:]), x.dtype, generator)


# ------------------------------------------------------------------ spec examples

def test_scatter_nd_spec_example_natural_form():
    ex = SCATTER_ND_EXAMPLE
    out = tdo.scatter_nd(torch.tensor(ex["input"], dtype=torch.float32), torch.tensor(ex["indices"]),
                         torch.tensor(ex["updates"], dtype=torch.float32))
    assert torch.equal(out, torch.tensor(ex["output"], dtype=torch.float32))


@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_spec_example_dml_form():
    # spec README 3: the padded DML form is {1,8}, {4,1}, {1,4} with counts 1 and 2.
    ex = SCATTER_ND_EXAMPLE
    x = torch.tensor(ex["input"], dtype=torch.float32).reshape(1, 8)
    i = torch.tensor(ex["indices"], dtype=torch.uint32).reshape(4, 1)
    u = torch.tensor(ex["updates"], dtype=torch.float32).reshape(1, 4)
    with tdo.feature_level("3_0"):
        out = tdo.scatter_nd(x, i, u, input_dimension_count=1, indices_dimension_count=2)
    assert torch.equal(out, torch.tensor(ex["output"], dtype=torch.float32).reshape(1, 8))


@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_spec_worked_size_example():
    # spec DML_SCATTER_ND.md: Input [3,4,5,6,7], count 5; Indices [1,1,1,2,3], count 3 ->
    # Updates [1,1,2,6,7]
    x = torch.randn(3, 4, 5, 6, 7)
    i = unique_indices((1, 1, 1, 2), (3, 4, 5), torch.int64)
    u = torch.randn(1, 1, 2, 6, 7)
    out = tdo.scatter_nd(x, i, u, input_dimension_count=5, indices_dimension_count=3)
    assert_same(out, scatter_nd_ref(x, i.reshape(2, 3), u.reshape(2, 6, 7)))
    with pytest.raises(tdo.ConstraintError, match=r"UpdatesTensor must have sizes \(1, 1, 2, 6, 7\)"):
        tdo.scatter_nd(x, i, u.reshape(1, 2, 1, 6, 7), input_dimension_count=5, indices_dimension_count=3)
    with pytest.raises(tdo.ConstraintError, match=r"UpdatesTensor.DimensionCount must equal"):
        tdo.scatter_nd(x, i, u.reshape(2, 6, 7), input_dimension_count=5, indices_dimension_count=3)


def test_scatter_nd_input_never_modified():
    x = torch.randn(5, 3)
    x0 = x.clone()
    tdo.scatter_nd(x, torch.tensor([[1], [2]]), torch.randn(2, 3))
    assert torch.equal(x, x0)


# ------------------------------------------------------------------ dtypes x reductions

@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=str)
@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_dtypes_reductions(dtype, index_dtype, reduction):
    g = torch.Generator().manual_seed(7)
    x = make_data((5, 4, 3), dtype, g)
    i = unique_indices((2, 3), (5, 4), index_dtype, generator=g)
    u = make_updates(x, i, g)
    assert_same(tdo.scatter_nd(x, i, u, reduction), scatter_nd_ref(x, i, u, reduction))


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.uint16, torch.float32,
                                   torch.float64, torch.bool, torch.bfloat16], ids=str)
@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_reductions_apply_every_duplicate(dtype, reduction):
    g = torch.Generator().manual_seed(3)
    x = make_data((4, 3), dtype, g)
    i = torch.tensor([[1], [-3], [2], [1], [1], [0]])
    u = make_updates(x, i, g)
    exact = not dtype.is_floating_point or reduction in ("max", "min")
    assert_same(tdo.scatter_nd(x, i, u, reduction), scatter_nd_ref(x, i, u, reduction), exact)


def test_scatter_nd_max_min_nan_and_signed_zero():
    x = torch.tensor([0.0, 1.0, float("nan"), -0.0])
    i = torch.tensor([[0], [1], [2], [3], [1]])
    u = torch.tensor([float("nan"), 2.0, 5.0, 0.0, float("nan")])
    for red in ("max", "min"):
        assert_same(tdo.scatter_nd(x, i, u, red), scatter_nd_ref(x, i, u, red), exact=False)


# ------------------------------------------------------------------ duplicates with "none"

@pytest.mark.parametrize("slice_len", [1, 5])
@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_duplicates_last_wins_in_deterministic_mode(deterministic, slice_len):
    x = torch.zeros(6, slice_len)
    i = torch.tensor([[1], [3], [1], [-5], [3], [0]])
    u = torch.arange(6 * slice_len, dtype=torch.float32).reshape(6, slice_len)
    out = tdo.scatter_nd(x.squeeze(-1) if slice_len == 1 else x, i, u.squeeze(-1) if slice_len == 1 else u)
    assert_same(out.reshape(6, slice_len), scatter_nd_ref(x, i, u))


@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_duplicates_never_mix():
    x = torch.zeros(3, 64)
    i = torch.tensor([[1]] * 50)
    u = torch.arange(50, dtype=torch.float32).unsqueeze(1).expand(50, 64).contiguous()
    out = tdo.scatter_nd(x, i, u)
    row = out[1]
    assert torch.all(row == row[0]) and 0 <= row[0] < 50


# ------------------------------------------------------------------ ranks, forms, layouts, empties

@pytest.mark.parametrize("r,k", [(1, 1), (2, 1), (2, 2), (3, 2), (4, 3), (5, 1), (6, 4), (7, 2), (8, 8), (8, 3)])
@pytest.mark.parametrize("reduction", ["none", "add"])
@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_ranks(r, k, reduction):
    g = torch.Generator().manual_seed(r * 10 + k)
    shape = tuple(int(s) for s in torch.randint(1, 4, (r,), generator=g))
    x = make_data(shape, torch.float64, g)
    n = min(3, int(np.prod(shape[:k])))
    i = unique_indices((n,), shape[:k], torch.int64, generator=g)
    u = make_updates(x, i, g)
    assert_same(tdo.scatter_nd(x, i, u, reduction), scatter_nd_ref(x, i, u, reduction))


@pytest.mark.parametrize("layout", ["transposed", "sliced", "updates_strided"])
@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_non_contiguous(layout):
    base = torch.randn(6, 8, 5)
    x = base.transpose(0, 1) if layout == "transposed" else base[::2, 1::2] if layout == "sliced" else base
    i = unique_indices((3, 1), x.shape[:1], torch.int64)
    u = make_updates(x, i)
    if layout == "updates_strided":
        u = torch.randn(u.shape[::-1]).permute(*reversed(range(u.dim())))
        assert not u.is_contiguous()
    assert_same(tdo.scatter_nd(x, i.transpose(0, 1), u.transpose(0, 1)),
                scatter_nd_ref(x, i.transpose(0, 1), u.transpose(0, 1)))


@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_zero_size():
    x = torch.randn(3, 4)
    assert torch.equal(tdo.scatter_nd(x, torch.zeros(0, 1, dtype=torch.int64), torch.zeros(0, 4)), x)
    assert tdo.scatter_nd(torch.randn(3, 0), torch.tensor([[1]]), torch.zeros(1, 0)).shape == (3, 0)
    with pytest.raises(IndexError, match="size 0"):
        tdo.scatter_nd(torch.randn(0, 2), torch.tensor([[0]]), torch.zeros(1, 2))


# ------------------------------------------------------------------ errors leave everything untouched

@pytest.mark.parametrize("variant", ["functional", "out", "inplace"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_out_of_range_modifies_nothing(variant, index_dtype):
    x = torch.randn(4, 5, 3)
    i = torch.tensor([[0, 1], [3, 4], [2, 5], [1, 1]]).to(index_dtype)       # 5 at (2, 1)
    u = torch.randn(4, 3)
    x0, u0 = x.clone(), u.clone()
    out = torch.full_like(x, 7.0)
    with pytest.raises(IndexError, match=r"value 5 at position \(2, 1\).*size 5"):
        if variant == "functional":
            tdo.scatter_nd(x, i, u)
        elif variant == "out":
            tdo.scatter_nd(x, i, u, out=out)
        else:
            tdo.scatter_nd_(x, i, u)
    assert torch.equal(x, x0) and torch.equal(u, u0) and torch.equal(out, torch.full_like(x, 7.0))


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_reports_the_first_bad_coordinate_of_many(k, index_dtype):
    """Among thousands of tuples (the kernel checks them a block at a time, on two threads),
    the refusal names the first bad coordinate in index order, whatever comes after it: a bad
    coordinate after a good one in its tuple, a negative one past the end, more bad ones later;
    and check_indices=False skips exactly the bad tuples."""
    g = torch.Generator().manual_seed(k)
    sizes = (3, 4, 5, 2, 3)[:k]
    n = 5000
    signed = index_dtype in (torch.int32, torch.int64)
    i = torch.stack([torch.randint(-s if signed else 0, s, (n,), generator=g) for s in sizes], 1)
    x = torch.randn(*sizes, 2)
    u = torch.randn(n, 2)
    prev = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for trial in range(4):
            j = i.clone()
            picks = torch.randint(0, n * k, (1 + trial,), generator=g).tolist()
            for p in picks:
                t, c = divmod(p, k)
                j[t, c] = (-sizes[c] - 1 - trial) if signed and trial % 2 else sizes[c] + trial
            t, c = divmod(min(picks), k)
            value = int(j[t, c])
            with pytest.raises(IndexError, match=rf"value {value} at position \({t}, {c}\)"):
                tdo.scatter_nd(x, j.to(index_dtype), u)
            assert_same(tdo.scatter_nd(x, j.to(index_dtype), u, check_indices=False),
                        scatter_nd_ref(x, j, u, skip_bad=True))
    finally:
        torch.set_num_threads(prev)


@pytest.mark.parametrize("case", ["element", "row", "half_add", "empty", "strided"])
@pytest.mark.parametrize("form", ["functional", "out"])
@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_copies_a_large_source(case, form):
    """A source of 1 MiB and more (the C++ kernel copies it into the result with torch's own
    copy kernel from that size, with its own copy below): the result is the source with the
    updates applied, for element rows, wide rows, the float16 sums of apply_in_float, no tuples,
    and a transposed source."""
    g = torch.Generator().manual_seed(len(case) + len(form))
    dtype = torch.float16 if case == "half_add" else torch.float32
    x = torch.randn(640, 512, generator=g).to(dtype)  # 640 KiB of float16, 1.25 MiB of float32
    if case == "half_add":
        x = torch.randn(1024, 1024, generator=g).to(dtype)  # 2 MiB
    if case == "strided":
        x = torch.randn(512, 640, generator=g).t()
    n = 0 if case == "empty" else 3000
    k = 1 if case == "row" else 2
    i = torch.stack([torch.randint(-s, s, (n,), generator=g) for s in x.shape[:k]], 1)
    u = torch.randn(n, *x.shape[k:], generator=g).to(dtype)
    red = "add" if case == "half_add" else "none"
    if case == "half_add":  # accumulated in float32 in index order, rounded once
        want = scatter_nd_ref(x.float(), i, u.float(), red).to(dtype)
    else:
        want = scatter_nd_ref(x, i, u, red)
    if form == "out":
        out = torch.full_like(x, float("nan")).contiguous()
        assert tdo.scatter_nd(x, i, u, reduction=red, out=out) is out
        got = out
    else:
        got = tdo.scatter_nd(x, i, u, reduction=red)
    assert_same(got, want)


@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_negative_indices_wrap_and_range():
    x = torch.zeros(4)
    out = tdo.scatter_nd(x, torch.tensor([[-1], [-4]]), torch.tensor([1.0, 2.0]))
    assert out.tolist() == [2.0, 0.0, 0.0, 1.0]
    with pytest.raises(IndexError, match=r"value -5 .*\[-4, 3\]"):
        tdo.scatter_nd(x, torch.tensor([[-5]]), torch.tensor([1.0]))


# ------------------------------------------------------------------ out= and in-place

@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_out_and_errors():
    x = torch.randn(5, 3)
    i = torch.tensor([[4], [0]])
    u = torch.randn(2, 3)
    out = torch.empty(5, 3)
    assert tdo.scatter_nd(x, i, u, out=out) is out
    assert torch.equal(out, tdo.scatter_nd(x, i, u))
    strided = torch.empty(3, 5).t()
    tdo.scatter_nd(x, i, u, "add", out=strided)
    assert torch.equal(strided, tdo.scatter_nd(x, i, u, "add"))
    with pytest.raises(ValueError, match="overlaps InputTensor"):
        tdo.scatter_nd(x, i, u, out=x)
    with pytest.raises(ValueError, match="overlaps UpdatesTensor"):
        tdo.scatter_nd(torch.randn(2, 3), torch.tensor([[0], [1]]), u, out=u)
    with pytest.raises(TypeError, match="dtype"):
        tdo.scatter_nd(x, i, u, out=torch.empty(5, 3, dtype=torch.float64))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_inplace(reduction):
    g = torch.Generator().manual_seed(5)
    x = make_data((6, 4), torch.int32, g)
    i = torch.tensor([[5], [-6], [2], [5]])
    u = make_updates(x, i, g)
    want = scatter_nd_ref(x, i, u, reduction)
    before = x._version
    res = tdo.scatter_nd_(x, i, u, reduction)
    assert res is x and x._version > before
    assert_same(x, want)          # slices: the last duplicate wins on the portable path


@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_inplace_strided_and_dml():
    base = torch.zeros(4, 6)
    view = base[:, ::2]                    # non-contiguous view: writes land in base
    tdo.scatter_nd_(view, torch.tensor([[1, 2]]), torch.tensor([5.0]))
    assert base[1, 4] == 5.0 and base.sum() == 5.0
    y = torch.zeros(1, 8)
    tdo.scatter_nd_(y, torch.tensor([[3]], dtype=torch.uint32), torch.tensor([[2.0]]),
                    input_dimension_count=1, indices_dimension_count=2)
    assert y[0, 3] == 2.0


def test_scatter_nd_inplace_refuses_a_leaf_that_requires_grad():
    leaf = torch.zeros(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        tdo.scatter_nd_(leaf, torch.tensor([[1]]), torch.tensor([1.0]))
    with pytest.raises(RuntimeError, match="requires grad"):
        torch.ops.torch_dml_ops.scatter_nd_(leaf, torch.tensor([[1]]), torch.tensor([1.0]))
    assert leaf[1] == 0.0
    # updates that require grad are recorded (like index_copy_), not refused
    x = torch.zeros(4)
    tdo.scatter_nd_(x, torch.tensor([[1]]), torch.tensor([1.0], requires_grad=True))
    assert x.requires_grad and x.grad_fn is not None and x[1] == 1.0
    with torch.no_grad():
        tdo.scatter_nd_(leaf, torch.tensor([[1]]), torch.tensor([1.0]))
    assert leaf[1] == 1.0


# ------------------------------------------------------------------ autograd

@pytest.mark.parametrize("reduction", ["none", "add"])
@pytest.mark.parametrize("form", ["natural", "dml", "rows"])
@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_gradcheck(reduction, form):
    g = torch.Generator().manual_seed(11)
    if form == "rows":
        x = torch.randn(5, 3, dtype=torch.float64, generator=g)
        i = unique_indices((3,), (5,), torch.int64, generator=g)
        kw = {}
    elif form == "natural":
        x = torch.randn(4, 3, dtype=torch.float64, generator=g)
        i = unique_indices((2, 2), (4, 3), torch.int32, generator=g)
        kw = {}
    else:
        x = torch.randn(1, 4, 3, dtype=torch.float64, generator=g)
        i = unique_indices((1, 2), (4,), torch.int64, generator=g).reshape(1, 2, 1)
        kw = dict(input_dimension_count=2, indices_dimension_count=2)
    u = torch.randn(tdo.gather_nd(x, i, **kw).shape, dtype=torch.float64, generator=g)
    x.requires_grad_(), u.requires_grad_()
    fn = lambda a, b: tdo.scatter_nd(a, i, b, reduction, **kw)
    assert torch.autograd.gradcheck(fn, (x, u))
    assert torch.autograd.gradgradcheck(fn, (x, u))




@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("form", ["natural", "dml", "one_tuple"])
@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_tuple_size_0_gradients(reduction, form):
    """k = 0 (each update covers the whole input): reverse and forward mode, and double
    backward for none/add (the formulas gather the gradient of the whole input per tuple, and
    the last tuple wins for "none")."""
    g = torch.Generator().manual_seed(12)
    n = 1 if form == "one_tuple" else 3
    x = torch.randn(4, 3, dtype=torch.float64, generator=g)
    u = torch.randn(n, 4, 3, dtype=torch.float64, generator=g)
    i = torch.zeros(n, 0, dtype=torch.int64)
    kw = {}
    if form == "dml":
        x, i, u = x.reshape(1, 4, 3), i.reshape(1, n, 0), u
        kw = dict(input_dimension_count=2, indices_dimension_count=2)
    x.requires_grad_(), u.requires_grad_()
    fn = lambda a, b: tdo.scatter_nd(a, i, b, reduction, **kw)   # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, u), check_forward_ad=True)
    if reduction in ("none", "add"):
        assert torch.autograd.gradgradcheck(fn, (x, u))
    if reduction == "none":      # the last update is the result: only it gets a gradient
        gx, gu = torch.autograd.grad(fn(x, u).sum(), (x, u))
        assert torch.equal(gx, torch.zeros_like(x))
        assert torch.equal(gu[-1], torch.ones(4, 3, dtype=torch.float64))
        assert torch.equal(gu[:-1], torch.zeros(n - 1, 4, 3, dtype=torch.float64))


def test_scatter_nd_tuple_size_0_in_place_autograd():
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    u = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    y = x * 1
    tdo.scatter_nd_(y, torch.zeros(2, 0, dtype=torch.int64), u, "add")
    y.sum().backward()
    assert torch.equal(x.grad, torch.ones(4, 3, dtype=torch.float64))
    assert torch.equal(u.grad, torch.ones(2, 4, 3, dtype=torch.float64))


def test_scatter_nd_tuple_size_0_fake_compile_export():
    """The fake kernel takes k = 0 (shapes only); torch.compile and torch.export agree with
    eager."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        out = tdo.scatter_nd(torch.randn(4, 3), torch.zeros(5, 0, dtype=torch.int64),
                             torch.randn(5, 4, 3), "max")
        assert out.shape == (4, 3)
        with pytest.raises(tdo.ConstraintError, match=r"UpdatesTensor must have sizes \(5, 4, 3\)"):
            tdo.scatter_nd(torch.randn(4, 3), torch.zeros(5, 0, dtype=torch.int64),
                           torch.randn(5, 3))

    def fn(x, i, u):
        return tdo.scatter_nd(x, i, u, "add") * 2

    x, i, u = torch.randn(4, 3), torch.zeros(2, 0, dtype=torch.int64), torch.randn(2, 4, 3)
    want = fn(x, i, u)
    assert torch.equal(torch.compile(fn, backend="aot_eager", fullgraph=True)(x, i, u), want)
    class M(torch.nn.Module):
        def forward(self, x, i, u):
            return fn(x, i, u)
    assert torch.equal(torch.export.export(M(), (x, i, u)).module()(x, i, u), want)


def test_scatter_nd_tuple_size_0_at_the_dml_levels():
    """k = 0 at the DirectML levels: DML_SCATTER_ND's page bounds the tuple size only from
    above ("mustn't exceed InputTensor.DimensionCount"), so the padded form takes it too."""
    x = torch.arange(12.).reshape(1, 4, 3)
    i = torch.zeros(1, 2, 0, dtype=torch.int32)
    u = torch.stack([torch.full((4, 3), 5.), torch.full((4, 3), 6.)])
    with tdo.feature_level("3_0"):
        out = tdo.scatter_nd(x, i, u, input_dimension_count=2, indices_dimension_count=2)
    assert torch.equal(out, torch.full((1, 4, 3), 6.))
    with tdo.feature_level("2_1"):
        out = tdo.scatter_nd(x.reshape(1, 1, 4, 3), i.to(torch.uint32).reshape(1, 1, 2, 0),
                             u.reshape(1, 2, 4, 3), input_dimension_count=2,
                             indices_dimension_count=2)
    assert torch.equal(out, torch.full((1, 1, 4, 3), 6.))


def test_gather_nd_still_refuses_tuple_size_0():
    """ONNX GatherND: 1 <= k <= rank - batch_dims (ScatterND's k = 0 has no GatherND
    counterpart)."""
    with pytest.raises(tdo.ConstraintError, match=r"index-tuple size and must be in \[1, 2\]"):
        tdo.gather_nd(torch.randn(4, 3), torch.zeros(2, 0, dtype=torch.int64))


def test_scatter_nd_grad_composes_with_gather():
    x = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    u = torch.randn(2, 2, dtype=torch.float64, requires_grad=True)
    i = torch.tensor([[3], [0]])
    g = torch.randn(5, 2, dtype=torch.float64)
    tdo.scatter_nd(x, i, u).backward(g)
    want_x = g.clone()
    want_x[[3, 0]] = 0
    assert torch.equal(x.grad, want_x) and torch.equal(u.grad, g[[3, 0]])


# ------------------------------------------------------------------ opcheck, compile, export

def _opcheck_samples():
    x = torch.randn(4, 3, 5)
    return [
        (x, torch.tensor([[1, 2], [-1, 0]]), torch.randn(2, 5), "none", None, None),
        (x, torch.tensor([[3], [0]], dtype=torch.uint32), torch.randn(2, 3, 5), "add", None, None),
        (x.to(torch.int32), torch.tensor([[1, 1, 1]]), torch.tensor([7], dtype=torch.int32), "max", None, None),
        (x.reshape(1, 4, 3, 5), torch.tensor([[[[0, 1]]]]), torch.randn(1, 1, 1, 5), "none", 3, 2),
        (x.to(torch.uint16), torch.tensor([[2, 2, 2]], dtype=torch.uint64), torch.tensor([9], dtype=torch.uint16), "mul", None, None),
    ]


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("sample", range(5))
def test_scatter_nd_opcheck(sample, requires_grad):
    x, i, u, red, ci, cq = _opcheck_samples()[sample]
    if requires_grad:
        if not x.dtype.is_floating_point:
            pytest.skip("integer data is not differentiable")
        x, u = x.clone().requires_grad_(), u.clone().requires_grad_()
    torch.library.opcheck(scatter_op, (x, i, u, red, ci, cq, "permissive", True))


def test_scatter_nd_out_and_inplace_opcheck():
    x, i, u = torch.randn(4, 5), torch.tensor([[1], [3]]), torch.randn(2, 5)
    torch.library.opcheck(torch.ops.torch_dml_ops.scatter_nd_out,
                          (x, i, u, "add", None, None, "permissive", True), {"out": torch.empty(4, 5)})
    torch.library.opcheck(torch.ops.torch_dml_ops.scatter_nd_,
                          (x.clone(), i, u, "none", None, None, "permissive", True))


@pytest.mark.compile
def test_scatter_nd_compile_fullgraph_no_graph_break():
    from torch._dynamo.testing import CompileCounterWithBackend
    torch._dynamo.reset()
    cnt = CompileCounterWithBackend("aot_eager")

    def fn(x, i, u, cache, ci, cu):
        y = tdo.scatter_nd(x, i, u) * 2
        y = tdo.scatter_nd(y, i, u, "add")
        tdo.scatter_nd_(cache, ci, cu)            # in-place, functionalized by the compiler
        return tdo.gather_nd(y, i).sum() + cache.sum()

    cfn = torch.compile(fn, backend=cnt, fullgraph=True, dynamic=True)
    for n in (5, 7, 9):
        x = torch.randn(n, 11, requires_grad=True)
        i = unique_indices((3,), (n,), torch.int64)
        u = torch.randn(3, 11, requires_grad=True)
        cache_c, cache_e = torch.zeros(n + 2, 13), torch.zeros(n + 2, 13)
        ci = unique_indices((2,), (n + 2,), torch.int64)
        cu = torch.randn(2, 13)
        got, want = cfn(x, i, u, cache_c, ci, cu), fn(x, i, u, cache_e, ci, cu)
        assert torch.allclose(got, want) and torch.equal(cache_c, cache_e)
        gx, gu = torch.autograd.grad(got, (x, u))
        wx, wu = torch.autograd.grad(want, (x, u))
        assert torch.allclose(gx, wx) and torch.allclose(gu, wu)
    assert cnt.frame_count == 1, cnt.frame_count


@pytest.mark.compile
def test_scatter_nd_export():
    class M(torch.nn.Module):
        def forward(self, x, i, u):
            return tdo.scatter_nd(x, i, u, "add") + 1

    x, i, u = torch.randn(6, 5), torch.tensor([[1], [-1], [1]]), torch.randn(3, 5)
    ep = torch.export.export(M(), (x, i, u))
    assert any("torch_dml_ops.scatter_nd" in str(n.target) for n in ep.graph.nodes)
    assert torch.equal(ep.module()(x, i, u), M()(x, i, u))


# ------------------------------------------------------------------ property test

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402


@st.composite
def scatter_problems(draw):
    r = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=r, max_size=r)))
    k = draw(st.integers(1, r))
    n = draw(st.integers(0, 6))
    dtype = draw(st.sampled_from(DATA_DTYPES))
    idx_dtype = draw(st.sampled_from(INDEX_DTYPES))
    reduction = draw(st.sampled_from(REDUCTIONS))
    seed = draw(st.integers(0, 2**16))
    # which portable strategy, or native
    small = draw(st.sampled_from([16384, -1] + (["native"] if NATIVE_OK else [])))
    return shape, k, n, dtype, idx_dtype, reduction, seed, small


@given(scatter_problems())
def test_scatter_nd_property_matches_oracle(problem):
    from torch_dml_ops.portable import scatter_nd as portable_scatter
    *problem, small = problem
    saved = portable_scatter.SMALL_SCATTER
    portable_scatter.SMALL_SCATTER = -1 if small == "native" else small
    try:
        with tdo._backend.override("native" if small == "native" else "torch"):
            _check_scatter_property(*problem)
    finally:
        portable_scatter.SMALL_SCATTER = saved


def _check_scatter_property(shape, k, n, dtype, idx_dtype, reduction, seed):
    g = torch.Generator().manual_seed(seed)
    x = make_data(shape, dtype, g)
    i = make_indices((n,), shape[:k], idx_dtype, negative=True, generator=g)   # duplicates allowed
    u = make_updates(x, i, g)
    prev = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        out = tdo.scatter_nd(x, i, u, reduction)
    finally:
        torch.use_deterministic_algorithms(prev)
    exact = not dtype.is_floating_point or reduction in ("none", "max", "min")
    assert_same(out, scatter_nd_ref(x, i, u, reduction), exact)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("into", ["functional", "out"])
@pytest.mark.parametrize("dtype,slice_len", [(torch.float32, 16), (torch.float32, 17),
                                             (torch.int8, 64), (torch.float64, 3),
                                             (torch.float32, 300)], ids=str)
@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_overwrite_into_a_copy_of_wide_rows(dtype, slice_len, into, threads):
    """Rows of 64 bytes and more written into a copy (functional, out=) go once each, from the
    last duplicate's update or from the input (the C++ kernel's row-winner map): duplicates,
    negative and skipped out-of-range tuples, untouched runs at both ends, split among threads
    (a destination of 16 MiB, or rows of 1 KiB and more)."""
    g = torch.Generator().manual_seed(11)
    row_bytes = slice_len * torch.empty(0, dtype=dtype).element_size()
    rows = 3000 if row_bytes >= SPLIT_ROW_BYTES else split_rows(row_bytes, 3000)
    x = make_data((rows, slice_len), dtype, g)
    i = torch.randint(-rows, rows, (2500, 1), generator=g)
    row = i % rows
    i[(row < 40) | (row >= rows - 40)] = 50          # the first and last 40 rows untouched
    i[::7] = i[3]                                    # one row, many times
    i[5], i[-3] = rows + 4, -rows - 1                # skipped with check_indices=False
    u = make_updates(x, i, g)
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        if into == "out":
            got = torch.full_like(x, 7)
            tdo.scatter_nd(x, i, u, check_indices=False, out=got)
        else:
            got = tdo.scatter_nd(x, i, u, check_indices=False)
    finally:
        torch.set_num_threads(prev)
    assert_same(got, scatter_nd_ref(x, i, u, skip_bad=True))


@pytest.mark.parametrize("into", ["functional", "in_place"])
@pytest.mark.usefixtures("portable_path")
def test_scatter_nd_small_overwrite_keeps_the_last_duplicate_on_two_threads(into):
    """Duplicates in an overwrite of fewer than SMALL_SCATTER elements, on two threads: the last
    one wins.  (torch's index_put_ without accumulate runs in parallel on the CPU and keeps any
    duplicate: the portable path's small scatter relied on it, and failed so on torch 2.14.1.)"""
    rows = 3000
    prev = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for seed in range(4):
            g = torch.Generator().manual_seed(seed)
            x = make_data((rows, 3), torch.float64, g)
            i = torch.randint(-rows, rows, (2500, 1), generator=g)
            i[::7] = i[3]                                # one row, many times
            u = make_updates(x, i, g)
            if into == "functional":
                got = tdo.scatter_nd(x, i, u)
            else:
                got = x.clone()
                tdo.scatter_nd_(got, i, u)
            assert_same(got, scatter_nd_ref(x, i, u))
    finally:
        torch.set_num_threads(prev)


@pytest.mark.skipif(not NATIVE_OK, reason="the C++ kernels are not built")
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int8, torch.float64,
                                   torch.bool], ids=str)
def test_scatter_nd_element_rows_split_between_two_threads(dtype, reduction):
    """An element scatter large enough for the C++ kernel to split the destination between two
    threads (16 MiB), each scanning every tuple and sending the other's to a scratch element
    instead of taking a branch: duplicates and a skipped tuple, functional and in place, bit for
    bit as the portable path."""
    g = torch.Generator().manual_seed(5)
    rows = split_rows(256 * torch.empty(0, dtype=dtype).element_size(), 512)
    x = make_data((rows, 256), dtype, g)
    i = torch.stack([torch.randint(-rows, rows, (80_000,), generator=g),
                     torch.randint(0, 256, (80_000,), generator=g)], 1)
    i[::5] = i[7]                                    # one element, many times
    i[11, 0] = rows + 88                             # out of range: skipped
    u = make_updates(x, i, g)
    prev, prev_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(2)
    try:
        # (the portable overwrite keeps the last duplicate only in deterministic mode; the C++
        # one always does)
        torch.use_deterministic_algorithms(True)
        with tdo._backend.override("torch"):
            want = tdo.scatter_nd(x, i, u, reduction, check_indices=False)
        torch.use_deterministic_algorithms(prev_det)
        with tdo._backend.override("native"):
            got = tdo.scatter_nd(x, i, u, reduction, check_indices=False)
            in_place = x.clone()
            tdo.scatter_nd_(in_place, i, u, reduction, check_indices=False)
    finally:
        torch.set_num_threads(prev)
        torch.use_deterministic_algorithms(prev_det)
    assert_same(got, want)
    assert_same(in_place, want)


@pytest.mark.usefixtures("portable_path")
@pytest.mark.parametrize("slice_len", [1, 3, 4, 6, 64])
def test_scatter_nd_rows_move_bits_exactly(slice_len):
    """Row copies may move wide elements: NaN payloads and -0.0 must survive bit for bit."""
    bits = torch.randint(0, 2**31, (5, 7, slice_len), dtype=torch.int64)
    bits[0, 0, 0] = 0x7FC00001
    bits[1, 2, -1] = 0x7F800001          # signalling NaN
    bits[2, 3, 0] = 0x80000000           # -0.0
    u = bits.to(torch.int32).view(torch.float32)
    x = torch.zeros(9, 7, slice_len)
    i = torch.tensor([[8], [0], [-2], [4], [1]])
    out = tdo.scatter_nd(x, i, u)
    assert torch.equal(out.view(torch.int32)[[8, 0, 7, 4, 1]], u.view(torch.int32))
    buf = x.clone()
    tdo.scatter_nd_(buf, i, u)
    assert torch.equal(buf.view(torch.int32), out.view(torch.int32))


_TORCH_REDUCE = {"max": "amax", "min": "amin", "mul": "prod"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", ["max", "min", "mul"])
def test_combining_gradients_are_scatter_reduces_bit_for_bit(reduction, dtype):
    """mul/max/min gradients are torch's scatter_reduce(include_self=True) gradients bit for bit
    (issue 41: a maximum tied three times got g * (1/3), 0.26783198, where torch gives g / 3,
    0.26783195; mul differed in a third of the elements), with ties, zeros (none, one, two in a
    slot, in the input and in the updates) and duplicates."""
    g = torch.Generator().manual_seed(41)
    rows, width, n = 6, 5, 24
    x = torch.randint(-2, 3, (rows, width), generator=g).to(dtype)
    u = torch.randint(-2, 3, (n, width), generator=g).to(dtype)
    if reduction == "mul":      # few zeros, many factors of magnitude other than 1
        x = torch.where(torch.rand(x.shape, generator=g) < 0.15, 0,
                        torch.randn(x.shape, generator=g)).to(dtype)
        u = torch.where(torch.rand(u.shape, generator=g) < 0.15, 0,
                        torch.randn(u.shape, generator=g)).to(dtype)
    # slot (0, 0): the result tied three times (the input and two updates; for mul, zeros)
    x[0, 0] = u[0, 0] = u[1, 0] = {"max": 5, "min": -5, "mul": 0}[reduction]
    row = torch.randint(0, rows, (n,), generator=g)
    row[:2] = 0
    grad = torch.randn(rows, width, generator=g).to(dtype)
    grad[0, 0] = 0.8034958839416504

    def ours(a, b):
        return tdo.scatter_nd(a, row[:, None], b, reduction)

    def torchs(a, b):
        return a.scatter_reduce(0, row[:, None].expand(n, width), b, _TORCH_REDUCE[reduction],
                                include_self=True)

    results = []
    for fn in (ours, torchs):
        a, b = x.clone().requires_grad_(), u.clone().requires_grad_()
        out = fn(a, b)
        out.backward(grad)
        results.append((out.detach(), a.grad, b.grad))
    (out, gx, gu), (want, want_gx, want_gu) = results
    bits = {torch.float32: torch.int32, torch.float64: torch.int64, torch.bfloat16: torch.int16}
    assert torch.equal(out.view(bits[dtype]), want.view(bits[dtype]))
    for got, ref, name in ((gx, want_gx, "input"), (gu, want_gu, "updates")):
        same = got.view(bits[dtype]) == ref.view(bits[dtype])        # -0.0 against 0.0 too
        assert bool(same.all()), (name, int((~same).sum()), got[~same][:5], ref[~same][:5])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_add_rounds_once_whatever_the_number_of_updates(any_backend, dev, dtype):
    """One accumulation rule for float16/bfloat16 add with duplicates: each element summed in
    float32 in index order, rounded once (torch's CPU index_add_), whatever the number of
    updates. Before: up to 16384 updated elements the sums were rounded after every add
    (index_put_), above once, so adding one zero update aimed at another row changed rows 0-2."""
    g = torch.Generator().manual_seed(41)
    x = make_data((4, 4), dtype, g).to(dev)
    i = torch.randint(0, 3, (4095, 1), generator=g)
    u = (torch.randn(4095, 4, generator=g) * 3).to(dtype)
    acc = x.cpu().float()
    for t in range(i.shape[0]):
        acc[i[t, 0]] += u[t].float()
    want = acc.to(dtype)
    got = tdo.scatter_nd(x, i.to(dev), u.to(dev), reduction="add")
    assert torch.equal(got.cpu().view(torch.int16), want.view(torch.int16))
    # one more update, of zeros, into row 3: rows 0-2 keep their bits (16384 updated elements)
    i2 = torch.cat([i, torch.tensor([[3]])])
    u2 = torch.cat([u, torch.zeros(1, 4, dtype=dtype)])
    got2 = tdo.scatter_nd(x, i2.to(dev), u2.to(dev), reduction="add")
    assert torch.equal(got2[:3].cpu().view(torch.int16), got[:3].cpu().view(torch.int16))
    small = tdo.scatter_nd(x, i[:5].to(dev), u[:5].to(dev), reduction="add")
    acc = x.cpu().float()
    for t in range(5):
        acc[i[t, 0]] += u[t].float()
    assert torch.equal(small.cpu().view(torch.int16), acc.to(dtype).view(torch.int16))


_HALF_SCRIPT = r"""
import sys, torch, torch_dml_ops as tdo
torch.manual_seed(0)
out = []
for dt in (torch.float16, torch.bfloat16):
    for L in (3, 8, 37, 64):
        x = (torch.randn(64, L) * torch.randint(-30, 30, (64, L)).float().exp2()).to(dt)
        u = (torch.randn(500, L) * torch.randint(-30, 30, (500, L)).float().exp2()).to(dt)
        flat = u.view(-1)
        flat[torch.rand(flat.shape) < 0.002] = float("nan")
        flat[torch.rand(flat.shape) < 0.002] = float("inf")
        i = torch.randint(0, 64, (500, 1))
        for red in ("add", "mul"):
            out.append(tdo.scatter_nd(x, i, u, reduction=red).view(torch.int16))
torch.save(out, sys.argv[1])
print(torch.ops.torch_dml_ops._cpu_isa())
"""


def test_half_sums_bit_identical_on_every_simd_path(tmp_path):
    """float16/bfloat16 add and mul through each conversion path the CPU offers (F16C and AVX2
    rows, the scalar ones under TORCH_DML_OPS_CPU_ISA=scalar), specials and odd widths
    included: the same bits."""
    import os
    import subprocess
    import sys
    from conftest import NATIVE_OK
    if not NATIVE_OK:
        pytest.skip("the C++ extension is not built")
    results = {}
    for isa in ("scalar", None):
        env = {k: v for k, v in os.environ.items() if k != "TORCH_DML_OPS_CPU_ISA"}
        if isa:
            env["TORCH_DML_OPS_CPU_ISA"] = isa
        path = tmp_path / f"{isa}.pt"
        res = subprocess.run([sys.executable, "-c", _HALF_SCRIPT, str(path)], env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        results[res.stdout.strip().splitlines()[-1]] = torch.load(path)
    assert "scalar" in results and len(results) == 2 or results.keys() == {"scalar"}
    first, *rest = results.values()
    for other in rest:
        assert all(torch.equal(a, b) for a, b in zip(first, other))
