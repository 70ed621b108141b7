"""gather_nd: semantics against the loop oracle, forms, dtypes, layouts, out=, autograd, compile."""
import numpy as np
import pytest
import torch

import torch_dml_ops as tdo
from conftest import NATIVE_OK, backend_param
from helpers import DATA_DTYPES, INDEX_DTYPES, make_data, make_indices
from reference import GATHER_ND_EXAMPLES, gather_nd_ref, to_bits

gather_op = torch.ops.torch_dml_ops.gather_nd


@pytest.fixture(params=["small", "large", backend_param("native")])
def portable_path(request, backend, monkeypatch):
    """Run a test through the native kernels and both strategies of the portable path: the one-call advanced-indexing
    path for small problems, and reduction-checked linearize + index_select for large ones."""
    from torch_dml_ops.portable import gather_nd as portable_gather
    # small/large: the portable path forced (the C++ kernels would take every CPU call);
    # native: the same test through the C++ kernels.
    backend("native" if request.param == "native" else "torch")
    if request.param == "large":
        monkeypatch.setattr(portable_gather, "SMALL_TUPLES", -1)
    return request.param


def assert_bits_equal(actual: torch.Tensor, expected_bits: np.ndarray):
    got = to_bits(actual)
    assert got.shape == expected_bits.shape, (got.shape, expected_bits.shape)
    np.testing.assert_array_equal(got, expected_bits)


# ------------------------------------------------------------------ spec examples

@pytest.mark.parametrize("ex", GATHER_ND_EXAMPLES, ids=lambda e: e["name"])
def test_gather_nd_spec_examples_dml_form(ex):
    x = torch.tensor(ex["input"], dtype=torch.float32).reshape(ex["input_sizes"])
    i = torch.tensor(ex["indices"], dtype=torch.uint32).reshape(ex["indices_sizes"])
    out = tdo.gather_nd(x, i, input_dimension_count=ex["input_dimension_count"],
                        indices_dimension_count=ex["indices_dimension_count"])
    expected = torch.tensor(ex["output"], dtype=torch.float32).reshape(ex["output_sizes"])
    assert out.shape == expected.shape
    assert torch.equal(out, expected)
    with tdo.feature_level("2_1") if x.dim() == 4 else tdo.feature_level("3_0"):
        out2 = tdo.gather_nd(x, i, input_dimension_count=ex["input_dimension_count"],
                             indices_dimension_count=ex["indices_dimension_count"])
    assert torch.equal(out2, expected)


def test_gather_nd_spec_example2_natural_form():
    x = torch.arange(8, dtype=torch.float32).reshape(2, 2, 2)
    i = torch.tensor([[0, 1], [1, 0]])
    assert torch.equal(tdo.gather_nd(x, i), torch.tensor([[2.0, 3.0], [4.0, 5.0]]))


def test_gather_nd_spec_worked_size_example():
    # spec DML_GATHER_ND.md: Input {3,4,5,6,7}, count 5; Indices {1,1,1,2,3}, count 3 -> {1,1,2,6,7}
    x = torch.randn(3, 4, 5, 6, 7)
    i = make_indices((1, 1, 1, 2), (3, 4, 5), torch.int64)
    out = tdo.gather_nd(x, i, input_dimension_count=5, indices_dimension_count=3)
    assert out.shape == (1, 1, 2, 6, 7)
    assert_bits_equal(out.reshape(1, 2, 6, 7), gather_nd_ref(x, i.reshape(1, 2, 3)))


def test_gather_nd_registered_op_same_as_function():
    x = torch.randn(4, 5, 6)
    i = make_indices((3, 2), (4, 5), torch.int64, negative=True)
    assert torch.equal(gather_op(x, i), tdo.gather_nd(x, i))
    assert torch.equal(gather_op(x, i, 0, None, None, "permissive", True), tdo.gather_nd(x, i))


# ------------------------------------------------------------------ dtypes

@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=str)
@pytest.mark.usefixtures("portable_path")
def test_gather_nd_dtypes(dtype, index_dtype):
    x = make_data((5, 4, 3), dtype)
    i = make_indices((2, 3), (5, 4), index_dtype, negative=True)
    out = tdo.gather_nd(x, i)
    assert out.dtype == dtype and out.shape == (2, 3, 3)
    assert_bits_equal(out, gather_nd_ref(x, i))


def test_gather_nd_preserves_nan_payload_and_negative_zero():
    bits = torch.tensor([0x7FC00001, 0x80000000, 0xFF800000, 0x3F800000], dtype=torch.int64)
    x = bits.to(torch.int32).view(torch.float32)
    i = torch.tensor([[3], [0], [1], [2]])
    out = tdo.gather_nd(x, i)
    assert torch.equal(out.view(torch.int32), x.view(torch.int32)[[3, 0, 1, 2]])


@pytest.mark.usefixtures("portable_path")
def test_gather_nd_uint64_indices_above_2_63_are_out_of_range():
    x = torch.randn(4)
    big = torch.tensor([[2**63 + 1]], dtype=torch.uint64)
    with pytest.raises(IndexError, match="9223372036854775809"):
        tdo.gather_nd(x, big)


# ------------------------------------------------------------------ ranks 1..8, batch dims

def _rank_cases():
    cases = []
    for r in range(1, 9):
        for k in sorted({1, r, (r + 1) // 2}):
            for q in (1, 2, 3):
                cases.append((r, k, q, 0))
            if r >= 2 and k < r:
                cases.append((r, k, 2, 1))
            if r >= 3 and k < r - 1:
                cases.append((r, k, 3, 2))
    return cases


@pytest.mark.parametrize("r,k,q,b", _rank_cases(), ids=lambda v: str(v))
@pytest.mark.usefixtures("portable_path")
def test_gather_nd_ranks(r, k, q, b):
    g = torch.Generator().manual_seed(r * 100 + k * 10 + q + b)
    shape = tuple(int(s) for s in torch.randint(1, 4, (r,), generator=g))
    x = make_data(shape, torch.float32, g)
    prefix = shape[:b] + tuple(int(s) for s in torch.randint(1, 4, (q - 1 - b,), generator=g))
    i = make_indices(prefix, shape[b:b + k], torch.int64, negative=True, generator=g)
    out = tdo.gather_nd(x, i, b)
    assert out.shape == i.shape[:-1] + x.shape[b + k:]
    assert_bits_equal(out, gather_nd_ref(x, i, b))


@pytest.mark.parametrize("pad", [0, 1, 3])
@pytest.mark.usefixtures("portable_path")
def test_gather_nd_dml_form_matches_natural(pad):
    x = torch.randn(3, 4, 5)
    i = make_indices((2, 2), (3, 4), torch.int32, negative=True)
    nat = tdo.gather_nd(x, i)
    n = 3 + pad
    xd = x.reshape((1,) * pad + x.shape)
    idd = i.reshape((1,) * (n - i.dim()) + i.shape)
    out = tdo.gather_nd(xd, idd, input_dimension_count=3, indices_dimension_count=3)
    assert out.shape == (1,) * (n - nat.dim()) + nat.shape
    assert torch.equal(out.reshape(nat.shape), nat)


def test_gather_nd_dml_form_with_batch_dims():
    x = torch.randn(1, 2, 3, 4)
    i = make_indices((1, 2, 5), (3,), torch.int64).reshape(1, 2, 5, 1)
    out = tdo.gather_nd(x, i, 1, input_dimension_count=3, indices_dimension_count=3)
    ref = gather_nd_ref(x[0], i[0], 1)
    assert out.shape == (1, 2, 5, 4)
    assert_bits_equal(out[0], ref)


# ------------------------------------------------------------------ layouts, empties, duplicates

@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded", "channels_last"])
@pytest.mark.usefixtures("portable_path")
def test_gather_nd_non_contiguous_input(layout):
    base = torch.randn(6, 8, 5, 4)
    x = {"transposed": base.transpose(0, 2), "sliced": base[::2, 1::3, :, ::2],
         "expanded": torch.randn(1, 8, 1, 4).expand(6, 8, 5, 4),
         "channels_last": base.contiguous(memory_format=torch.channels_last)}[layout]
    assert not x.is_contiguous()
    i = make_indices((7,), x.shape[:2], torch.int64, negative=True)
    assert_bits_equal(tdo.gather_nd(x, i), gather_nd_ref(x, i))
    i1 = make_indices((3, 2), x.shape[:1], torch.int64)
    assert_bits_equal(tdo.gather_nd(x, i1), gather_nd_ref(x, i1))
    i3 = make_indices((5,), x.shape[:3], torch.int32, negative=True)
    assert_bits_equal(tdo.gather_nd(x, i3, ), gather_nd_ref(x, i3))


@pytest.mark.usefixtures("portable_path")
def test_gather_nd_non_contiguous_indices():
    x = torch.randn(5, 6, 7)
    i = make_indices((4, 3), (5, 6), torch.int64, negative=True).transpose(0, 1)
    assert not i.is_contiguous()
    assert_bits_equal(tdo.gather_nd(x, i), gather_nd_ref(x, i))
    cols = make_indices((8,), (5, 5, 6, 6), torch.int64)[:, ::2]   # strided last dim
    assert_bits_equal(tdo.gather_nd(x, cols), gather_nd_ref(x, cols))


@pytest.mark.parametrize("case", ["no_tuples", "empty_slice", "empty_batch", "empty_input_no_tuples"])
@pytest.mark.usefixtures("portable_path")
def test_gather_nd_zero_size(case):
    if case == "no_tuples":
        x, i, b, shape = torch.randn(3, 4), torch.zeros(0, 1, dtype=torch.int64), 0, (0, 4)
    elif case == "empty_slice":
        x, i, b, shape = torch.randn(3, 0), torch.tensor([[2], [0]]), 0, (2, 0)
    elif case == "empty_batch":
        x, i, b, shape = torch.randn(0, 3, 2), torch.zeros(0, 5, 1, dtype=torch.int64), 1, (0, 5, 2)
    else:
        x, i, b, shape = torch.randn(0, 3), torch.zeros(2, 0, 1, dtype=torch.int64), 0, (2, 0, 3)
    out = tdo.gather_nd(x, i, b)
    assert out.shape == shape and out.dtype == x.dtype


@pytest.mark.usefixtures("portable_path")
def test_gather_nd_zero_size_dimension_with_tuples_is_index_error():
    with pytest.raises(IndexError, match="size 0"):
        tdo.gather_nd(torch.randn(0, 3), torch.tensor([[0]]))


@pytest.mark.usefixtures("portable_path")
def test_gather_nd_output_whose_strides_overflow_is_refused_as_torch_refuses_it():
    """No tuples, but sizes beside the empty dimension whose contiguous strides overflow: the
    output cannot be allocated, and the error is torch's own (torch.empty refuses that shape)."""
    x = torch.randn(4, 3, 5)
    i = torch.empty_strided((0, 2**62, 4, 1), (1, 1, 1, 1), dtype=torch.int64)
    with pytest.raises(RuntimeError, match="Stride calculation overflowed"):
        torch.empty(0, 2**62, 4, 5)
    with pytest.raises(RuntimeError, match="Stride calculation overflowed"):
        tdo.gather_nd(x, i)
    with pytest.raises(RuntimeError, match="Stride calculation overflowed"):
        gather_op(x, i)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n", [1, 3, 4, 5, 9, 5000])
@pytest.mark.parametrize("bad", [None, "first", "middle", "last"])
@pytest.mark.usefixtures("portable_path")
def test_gather_nd_wide_rows_every_count_and_bad_position(n, bad, threads):
    """Rows of 68 bytes (the C++ kernel's generic row copy, which resolves tuples a few ahead
    of the copy): every tuple count around its lead, split among threads, with an out-of-range
    tuple first, in the middle or last (IndexError, or a zero slice with check_indices=False)."""
    g = torch.Generator().manual_seed(n)
    x = make_data((40, 6, 17), torch.float32, g)
    i = torch.randint(-6, 6, (n, 2), generator=g)
    i[:, 0] = torch.randint(-40, 40, (n,), generator=g)
    if bad is not None:
        i[{"first": 0, "middle": n // 2, "last": n - 1}[bad], 1] = 6
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = tdo.gather_nd(x, i, check_indices=False)
        if bad is not None:
            with pytest.raises(IndexError, match="out of range"):
                tdo.gather_nd(x, i)
        else:
            assert torch.equal(tdo.gather_nd(x, i), got)
    finally:
        torch.set_num_threads(prev)
    np.testing.assert_array_equal(to_bits(got), gather_nd_ref(x, i, skip_bad=True))


@pytest.mark.parametrize("layout", ["permuted", "transposed_slice", "sliced"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.float16, torch.uint32, torch.bool])
@pytest.mark.parametrize("batch_dims", [0, 1])
@pytest.mark.parametrize("out", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_gather_nd_unchecked_bad_tuples_of_a_strided_input(portable_path, monkeypatch, layout,
                                                            dtype, batch_dims, out, masked):
    """check_indices=False with an out-of-range tuple, from an input whose gathered slices are
    not contiguous (the portable path's zero-fill once failed on its non-contiguous result).
    masked: the portable path's strategy for devices whose index kernels assert (CUDA), forced
    on the CPU."""
    if masked:
        if portable_path == "native":
            pytest.skip("the portable path's strategy")
        from torch_dml_ops.portable import gather_nd as portable_gather
        monkeypatch.setattr(portable_gather, "torch_checks_bounds", lambda t: False)
    g = torch.Generator().manual_seed(3)
    base = make_data((2, 5, 5), dtype, g)
    x = {"permuted": base.permute(2, 1, 0), "transposed_slice": base.transpose(1, 2),
         "sliced": make_data((5, 5, 4), dtype, g)[:, :, ::2]}[layout]
    shape = tuple(x.shape)
    # tuples into dimension batch_dims (size shape[batch_dims]): in range, negative, and 9,
    # out of range for every layout
    i = torch.tensor([[1], [-2], [9], [0]]).repeat(shape[0] if batch_dims else 3, 1, 1)
    if batch_dims:
        i[1, 2, 0] = 2      # one batch with every tuple in range
    want = gather_nd_ref(x, i, batch_dims, skip_bad=True)
    if out:
        got = torch.empty(want.shape, dtype=dtype).transpose(0, -1).contiguous().transpose(0, -1)
        tdo.gather_nd(x, i, batch_dims, check_indices=False, out=got)
    else:
        got = tdo.gather_nd(x, i, batch_dims, check_indices=False)
    assert_bits_equal(got, want)


@pytest.mark.usefixtures("portable_path")
def test_gather_nd_duplicates():
    x = torch.randn(4, 3)
    i = torch.tensor([[1], [1], [-1], [3]])
    assert_bits_equal(tdo.gather_nd(x, i), gather_nd_ref(x, i))


# ------------------------------------------------------------------ index range

@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.usefixtures("portable_path")
def test_gather_nd_out_of_range_names_value_and_position(index_dtype):
    x = torch.randn(4, 5, 6)
    i = torch.tensor([[[0, 1], [3, 4]], [[2, 5], [1, 1]]]).to(index_dtype)   # 5 at (1, 0, 1)
    with pytest.raises(IndexError) as e:
        tdo.gather_nd(x, i)
    msg = str(e.value)
    assert "IndicesTensor" in msg and "value 5" in msg and "(1, 0, 1)" in msg and "size 5" in msg


@pytest.mark.usefixtures("portable_path")
def test_gather_nd_negative_out_of_range():
    x = torch.randn(4, 5)
    with pytest.raises(IndexError, match=r"value -5 at position \(1, 0\).*\[-4, 3\]"):
        tdo.gather_nd(x, torch.tensor([[0], [-5]]))


@pytest.mark.usefixtures("portable_path")
def test_gather_nd_failed_call_modifies_nothing():
    x = torch.randn(4, 5)
    i = torch.tensor([[0], [9]])
    out = torch.full((2, 5), 7.0)
    x0, i0 = x.clone(), i.clone()
    with pytest.raises(IndexError):
        tdo.gather_nd(x, i, out=out)
    assert torch.equal(out, torch.full((2, 5), 7.0)) and torch.equal(x, x0) and torch.equal(i, i0)


@pytest.mark.usefixtures("portable_path")
def test_gather_nd_unchecked_valid_indices():
    x = torch.randn(4, 5, 6)
    i = make_indices((9,), (4, 5), torch.int64, negative=True)
    assert torch.equal(tdo.gather_nd(x, i, check_indices=False), tdo.gather_nd(x, i))


# ------------------------------------------------------------------ out=

@pytest.mark.usefixtures("portable_path")
def test_gather_nd_out():
    x = torch.randn(50, 16)
    i = make_indices((30,), (50,), torch.int64)
    out = torch.empty(30, 16)
    res = tdo.gather_nd(x, i, out=out)
    assert res is out and torch.equal(out, tdo.gather_nd(x, i))
    strided = torch.empty(16, 30).t()
    tdo.gather_nd(x, i, out=strided)
    assert torch.equal(strided, out)


@pytest.mark.usefixtures("portable_path")
def test_gather_nd_out_dml_form():
    x = torch.arange(8.0).reshape(1, 2, 2, 2)
    i = torch.tensor([[[[0, 1], [1, 0]]]], dtype=torch.uint32)
    out = torch.empty(1, 1, 2, 2)
    tdo.gather_nd(x, i, input_dimension_count=3, indices_dimension_count=2, out=out)
    assert torch.equal(out, torch.tensor([[[[2.0, 3.0], [4.0, 5.0]]]]))


@pytest.mark.parametrize("bad,exc,match", [
    (lambda x: torch.empty(3, 5), ValueError, "shape"),
    (lambda x: torch.empty(2, 5, dtype=torch.float64), TypeError, "dtype"),
    (lambda x: x[:2], ValueError, "overlaps InputTensor"),
    (lambda x: torch.empty(1, 5).expand(2, 5), ValueError, "internal overlap"),
], ids=["shape", "dtype", "overlap", "self_overlap"])
def test_gather_nd_out_errors(bad, exc, match):
    x = torch.randn(4, 5)
    with pytest.raises(exc, match=match):
        tdo.gather_nd(x, torch.tensor([[0], [1]]), out=bad(x))


def test_gather_nd_out_with_requires_grad_refused():
    x = torch.randn(4, 5, requires_grad=True)
    with pytest.raises(RuntimeError, match="out="):
        tdo.gather_nd(x, torch.tensor([[0]]), out=torch.empty(1, 5))


# ------------------------------------------------------------------ autograd

def _grad_cases():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 3, 5, dtype=torch.float64, generator=g)
    return [
        ("dup_rows", x, torch.tensor([[1], [1], [-1], [0]]), 0, None, None),
        ("elements", x, make_indices((6,), (4, 3, 5), torch.int64, True, g), 0, None, None),
        ("pairs_uint32", x, make_indices((2, 3), (4, 3), torch.uint32, False, g), 0, None, None),
        ("batch", x, make_indices((4, 2), (3,), torch.int32, True, g), 1, None, None),
        ("dml", x.reshape(1, 4, 3, 5), make_indices((1, 1, 3), (4, 3), torch.int64, True, g), 0, 3, 2),
    ]


@pytest.mark.parametrize("name,x,i,b,ci,cq", _grad_cases(), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.usefixtures("portable_path")
def test_gather_nd_gradcheck(name, x, i, b, ci, cq):
    x = x.clone().requires_grad_()
    fn = lambda t: tdo.gather_nd(t, i, b, input_dimension_count=ci, indices_dimension_count=cq)
    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))


@pytest.mark.parametrize("name,x,i,b,ci,cq", _grad_cases(), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("which", ["portable", backend_param("native")])
def test_gather_nd_backward_op_is_the_adjoint(name, x, i, b, ci, cq, which, backend):
    """The backward op, called with only the indexed dims' sizes (the rest of the input's shape
    comes from grad), is gather's adjoint: <gather(x), g> == <x, gather_nd_backward(g)> with
    integer-valued data (exact; gather itself is checked against the reference above), and its
    result has the input's shape."""
    backend("torch" if which == "portable" else "native")
    x = torch.randint(-9, 10, x.shape, generator=torch.Generator().manual_seed(1)).double()
    out = tdo.gather_nd(x, i, b, input_dimension_count=ci, indices_dimension_count=cq)
    g = torch.randint(-9, 10, out.shape, generator=torch.Generator().manual_seed(2)).double()
    start = x.ndim - (ci or x.ndim) + b
    sizes = list(x.shape[start:start + i.shape[-1]])
    gi = torch.ops.torch_dml_ops.gather_nd_backward(g, i, sizes, b, ci, cq)
    assert gi.shape == x.shape
    assert float((out * g).sum()) == float((x * gi).sum())


@pytest.mark.usefixtures("portable_path")
def test_gather_nd_grad_accumulates_duplicates():
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    i = torch.tensor([[1], [1], [-3], [0]])
    g = torch.randn(4, 3, dtype=torch.float64)
    tdo.gather_nd(x, i).backward(g)
    expected = torch.zeros(4, 3, dtype=torch.float64)
    for t, row in enumerate([1, 1, 1, 0]):
        expected[row] += g[t]
    assert torch.equal(x.grad, expected)


# ------------------------------------------------------------------ opcheck

def _opcheck_samples():
    x = torch.randn(4, 3, 5)
    return [
        (x, torch.tensor([[1, 2], [-1, 0]]), 0, None, None),
        (x.to(torch.float64), torch.tensor([[3], [0]], dtype=torch.uint32), 0, None, None),
        (x, make_indices((4, 2), (3,), torch.int32, True), 1, None, None),
        (x.reshape(1, 4, 3, 5), torch.tensor([[[[0, 1]]]]), 0, 3, 2),
        (x.to(torch.uint16), torch.tensor([[1, 1, 1]], dtype=torch.uint64), 0, None, None),
        (x[:, :, ::2], torch.tensor([[2], [1]]), 0, None, None),
    ]


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("sample", range(6))
def test_gather_nd_opcheck(sample, requires_grad):
    x, i, b, ci, cq = _opcheck_samples()[sample]
    if requires_grad:
        if not x.dtype.is_floating_point:
            pytest.skip("integer data has no gradient")
        x = x.clone().requires_grad_()
    torch.library.opcheck(gather_op, (x, i, b, ci, cq, "permissive", True))


def test_gather_nd_out_opcheck():
    x = torch.randn(4, 5)
    i = torch.tensor([[1], [3]])
    torch.library.opcheck(torch.ops.torch_dml_ops.gather_nd_out, (x, i, 0, None, None, "permissive", True),
                          {"out": torch.empty(2, 5)})


@pytest.mark.skipif(not NATIVE_OK, reason="the C++ kernels are not built")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int8,
                                   torch.float64, torch.bool], ids=str)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("slice_len", [1, 3])
def test_gather_nd_backward_short_rows_split_between_two_threads(dtype, index_dtype, slice_len):
    """The backward of a gather of short rows (1 or 3 elements) large enough for the C++ kernel
    to split the gradient's rows between two threads, each adding the other's tuples into a
    scratch row instead of taking a branch: duplicates accumulate in index order, bit for bit as
    the portable path."""
    g = torch.Generator().manual_seed(3)
    grad = make_data((80_000,) + (slice_len,) * (slice_len > 1), dtype, g)
    i = torch.stack([torch.randint(-1024, 1024, (80_000,), generator=g),   # 1-byte rows too
                     torch.randint(0, 512, (80_000,), generator=g)], 1).to(index_dtype)
    i[::5] = i[7]                                    # one element, many times
    op = torch.ops.torch_dml_ops.gather_nd_backward
    prev = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with tdo._backend.override("torch"):
            want = op(grad, i, [1024, 512], 0, None, None)
        with tdo._backend.override("native"):
            got = op(grad, i, [1024, 512], 0, None, None)
    finally:
        torch.set_num_threads(prev)
    assert got.dtype == want.dtype and got.shape == want.shape == (1024, 512) + grad.shape[1:]
    np.testing.assert_array_equal(to_bits(got), to_bits(want))


def test_gather_nd_backward_opcheck():
    g = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    i = torch.tensor([[1, 2], [1, 2], [-1, 0]])
    torch.library.opcheck(torch.ops.torch_dml_ops.gather_nd_backward, (g, i, [4, 3], 0, None, None))


# ------------------------------------------------------------------ torch.compile / export

@pytest.mark.compile
def test_gather_nd_compile_fullgraph_no_graph_break():
    from torch._dynamo.testing import CompileCounterWithBackend
    torch._dynamo.reset()
    cnt = CompileCounterWithBackend("aot_eager")

    def fn(x, i, j):
        with tdo.feature_level("3_0"):
            y = tdo.gather_nd(x, i) * 2
        return tdo.gather_nd(y, j, 1).sum(-1)

    cfn = torch.compile(fn, backend=cnt, fullgraph=True, dynamic=True)
    for n in (5, 7, 9):
        x = torch.randn(n, 4, 11, requires_grad=True)   # sizes distinct from n+1 and 3 (duck sizing)
        i = make_indices((n + 1,), (n,), torch.int64, negative=True)
        j = make_indices((n + 1, 3), (4,), torch.int32, negative=True)
        got = cfn(x, i, j)
        want = fn(x, i, j)
        assert torch.equal(got, want)
        (gx,) = torch.autograd.grad(got.sum(), x)
        (wx,) = torch.autograd.grad(want.sum(), x)
        assert torch.allclose(gx, wx)
    assert cnt.frame_count == 1, cnt.frame_count      # one graph for three shapes: dynamic, no break


@pytest.mark.compile
def test_gather_nd_compile_errors_match_eager():
    torch._dynamo.reset()

    @torch.compile(backend="aot_eager", fullgraph=True)
    def fn(x, i):
        return tdo.gather_nd(x, i)

    with pytest.raises(Exception, match="index-tuple size"):
        fn(torch.randn(3), torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(IndexError, match="value 3"):
        fn(torch.randn(3), torch.tensor([[3]]))


@pytest.mark.compile
def test_gather_nd_compile_inductor():
    torch._dynamo.reset()

    def fn(x, i):
        return tdo.gather_nd(x.sin(), i) + 1

    cfn = torch.compile(fn, fullgraph=True)
    x = torch.randn(6, 5)
    i = make_indices((4,), (6,), torch.int64, negative=True)
    assert torch.allclose(cfn(x, i), fn(x, i))


@pytest.mark.compile
def test_gather_nd_export():
    class M(torch.nn.Module):
        def forward(self, x, i):
            return tdo.gather_nd(x, i, 1) + 1

    x = torch.randn(3, 6, 5)
    i = make_indices((3, 4), (6,), torch.int64, negative=True)
    batch = torch.export.Dim("batch", min=2)
    ep = torch.export.export(M(), (x, i), dynamic_shapes=({0: batch}, {0: batch}))
    assert any("torch_dml_ops.gather_nd" in str(n.target) for n in ep.graph.nodes)
    x2 = torch.randn(5, 6, 5)
    i2 = make_indices((5, 4), (6,), torch.int64)
    assert torch.equal(ep.module()(x2, i2), M()(x2, i2))


# ------------------------------------------------------------------ property test

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402


@st.composite
def gather_problems(draw):
    r = draw(st.integers(1, 5))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=r, max_size=r)))
    b = draw(st.integers(0, r - 1))
    k = draw(st.integers(1, r - b))
    q_extra = draw(st.integers(0, 2))
    prefix = shape[:b] + tuple(draw(st.lists(st.integers(0, 3), min_size=q_extra, max_size=q_extra)))
    dtype = draw(st.sampled_from(DATA_DTYPES))
    idx_dtype = draw(st.sampled_from(INDEX_DTYPES))
    seed = draw(st.integers(0, 2**16))
    # which portable strategy, or native
    small = draw(st.sampled_from([2048, -1] + (["native"] if NATIVE_OK else [])))
    return shape, b, k, prefix, dtype, idx_dtype, seed, small


@given(gather_problems())
def test_gather_nd_property_matches_oracle(problem):
    from torch_dml_ops.portable import gather_nd as portable_gather
    shape, b, k, prefix, dtype, idx_dtype, seed, small = problem
    saved = portable_gather.SMALL_TUPLES
    portable_gather.SMALL_TUPLES = -1 if small == "native" else small
    try:
        with tdo._backend.override("native" if small == "native" else "torch"):
            _check_property(shape, b, k, prefix, dtype, idx_dtype, seed)
    finally:
        portable_gather.SMALL_TUPLES = saved


def _check_property(shape, b, k, prefix, dtype, idx_dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = make_data(shape, dtype, g)
    n_tuples = int(np.prod(prefix)) if prefix else 1
    sizes = shape[b:b + k]
    if n_tuples and 0 in sizes:
        i = torch.zeros(prefix + (k,), dtype=idx_dtype)
        with pytest.raises(IndexError):
            tdo.gather_nd(x, i, b)
        return
    i = make_indices(prefix, sizes, idx_dtype, negative=True, generator=g)
    assert_bits_equal(tdo.gather_nd(x, i, b), gather_nd_ref(x, i, b))


def _element_bad_cases():
    for dt in INDEX_DTYPES:
        signed = dt in (torch.int64, torch.int32)
        for col, val in [(0, 4), (0, -5), (1, 5), (1, -6), (0, 2**63 + 3)]:
            if (val < 0 and not signed) or (val >= 2**31 and dt != torch.uint64):
                continue     # not representable in this index type
            yield pytest.param(dt, col, val, id=f"{dt}-col{col}-{val}")


@pytest.mark.usefixtures("portable_path")
@pytest.mark.parametrize("index_dtype,bad_col,bad_value", list(_element_bad_cases()))
def test_gather_nd_element_gather_out_of_range(index_dtype, bad_col, bad_value):
    """Element gathers (tuple size == rank) range-check column 0 through torch.take's own check."""
    signed = index_dtype in (torch.int64, torch.int32)
    x = torch.randn(4, 5)
    i = make_indices((6,), (4, 5), torch.int64, negative=signed)
    vals = i.tolist()
    vals[3][bad_col] = bad_value
    if index_dtype == torch.uint64:
        i = torch.tensor([[v % 2**64 for v in row] for row in vals], dtype=torch.uint64)
    else:
        i = torch.tensor(vals).to(index_dtype)
    with pytest.raises(IndexError, match=rf"value {bad_value} at position \(3, {bad_col}\)"):
        tdo.gather_nd(x, i)
    good = i.clone()
    good[3, bad_col] = 1
    assert_bits_equal(tdo.gather_nd(x, good), gather_nd_ref(x, good))


@pytest.mark.usefixtures("portable_path")
@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("b", [0, 1])
@pytest.mark.parametrize("bad_col", [0, 1])
@pytest.mark.parametrize("high", [True, False], ids=["high", "low"])
def test_gather_nd_out_of_range_every_strategy(contiguous, b, bad_col, high):
    base = torch.randn(3, 5, 6, 4)
    x = base if contiguous else base.transpose(2, 3).contiguous().transpose(2, 3)[:, :, :, ::2]
    sizes = x.shape[b:b + 2]
    bad_value = sizes[bad_col] if high else -sizes[bad_col] - 1
    i = make_indices(x.shape[:b] + (4,), sizes, torch.int64, negative=True)
    where = (2, bad_col) if b == 0 else (1, 2, bad_col)
    i[where] = bad_value
    pos = str(where).replace("(", r"\(").replace(")", r"\)")
    out = torch.full(i.shape[:-1] + x.shape[b + 2:], 3.0)
    with pytest.raises(IndexError, match=rf"value {bad_value} at position {pos}"):
        tdo.gather_nd(x, i, b)
    with pytest.raises(IndexError, match=rf"value {bad_value}"):
        tdo.gather_nd(x, i, b, out=out)
    assert torch.equal(out, torch.full_like(out, 3.0))
