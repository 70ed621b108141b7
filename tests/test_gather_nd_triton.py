"""The Triton gather kernel, bit-identical to the portable path.

Without a GPU these run in triton's interpreter on CPU tensors (TRITON_INTERPRET=1, set by
conftest.py); with one, on CUDA.  Inputs stay small: the interpreter is slow.
"""
import pytest
import torch

import torch_dml_ops as tdo
from conftest import TRITON_DEVICE
from helpers import DATA_DTYPES, INDEX_DTYPES, make_data, make_indices
from reference import GATHER_ND_EXAMPLES, gather_nd_ref, to_bits

pytestmark = pytest.mark.triton
DEV = TRITON_DEVICE


@pytest.fixture
def launches(monkeypatch):
    """Counts launcher calls, so a test knows the Triton path really ran."""
    # the op kernels call the launcher by its name in the op's module
    from torch_dml_ops.triton_kernels import gather_nd as tk
    calls = []
    real = tk.gather_nd_triton

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(tk, "gather_nd_triton", spy)
    return calls


@pytest.fixture
def both(backend, launches):
    """both(fn): fn() under the portable path and under Triton; results must be bit-identical.
    ``launched=False``: the Triton backend must leave the call to torch's indexing (a layout its
    kernel cannot walk without a contiguous copy of the input)."""
    def run(fn, launched=True):
        backend("torch")
        want = fn()
        assert not launches
        backend("triton")
        got = fn()
        if launched:
            assert launches, "the Triton launcher did not run"
        else:
            assert not launches, "the Triton launcher ran on a layout it would copy whole"
        launches.clear()
        assert got.shape == want.shape and got.dtype == want.dtype
        assert torch.equal(torch.from_numpy(to_bits(got)), torch.from_numpy(to_bits(want)))
        return got
    return run


@pytest.mark.parametrize("ex", GATHER_ND_EXAMPLES, ids=lambda e: e["name"])
def test_gather_nd_triton_spec_examples(backend, ex):
    backend("triton")
    x = torch.tensor(ex["input"], dtype=torch.float32, device=DEV).reshape(ex["input_sizes"])
    i = torch.tensor(ex["indices"], dtype=torch.uint32, device=DEV).reshape(ex["indices_sizes"])
    out = tdo.gather_nd(x, i, input_dimension_count=ex["input_dimension_count"],
                        indices_dimension_count=ex["indices_dimension_count"])
    expected = torch.tensor(ex["output"], dtype=torch.float32).reshape(ex["output_sizes"])
    assert torch.equal(out.cpu(), expected)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=str)
def test_gather_nd_triton_dtypes(backend, both, dtype, index_dtype):
    x = make_data((5, 4, 3), dtype).to(DEV)
    i = make_indices((2, 3), (5, 4), index_dtype, negative=True).to(DEV)
    both(lambda: tdo.gather_nd(x, i))


@pytest.mark.parametrize("r,k,b", [(1, 1, 0), (2, 2, 0), (3, 1, 1), (4, 2, 1), (5, 3, 0), (6, 2, 2),
                                   (7, 4, 1), (8, 3, 2), (8, 8, 0)])
def test_gather_nd_triton_ranks(backend, both, r, k, b):
    g = torch.Generator().manual_seed(r * 10 + k)
    shape = tuple(int(s) for s in torch.randint(1, 4, (r,), generator=g))
    x = make_data(shape, torch.float32, g).to(DEV)
    i = make_indices(shape[:b] + (3,), shape[b:b + k], torch.int64, True, g).to(DEV)
    got = both(lambda: tdo.gather_nd(x, i, b))
    assert to_bits(got).tolist() == gather_nd_ref(x, i, b).tolist()


@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded", "batch_strided"])
def test_gather_nd_triton_non_contiguous(backend, both, layout):
    base = torch.randn(6, 8, 5, 4, device=DEV)
    x = {"transposed": base.transpose(0, 2), "sliced": base[::2, 1::3, :, ::2],
         "expanded": torch.randn(1, 8, 1, 4, device=DEV).expand(6, 8, 5, 4),
         "batch_strided": base.transpose(0, 1)}[layout]
    # the kernel walks batch and slice dimensions that each merge into one strided dimension;
    # the others (the transposed and the expanded slice of k = 2) go to torch's indexing,
    # which reads them through their strides: no contiguous copy of the input either way
    walks = {"transposed": (False, True, True), "sliced": (True, True, True),
             "expanded": (False, True, True), "batch_strided": (True, True, True)}[layout]
    i = make_indices((7,), x.shape[:2], torch.int32, negative=True).to(DEV)
    both(lambda: tdo.gather_nd(x, i), walks[0])
    ib = make_indices((x.shape[0], 3), x.shape[1:3], torch.int64, negative=True).to(DEV)
    both(lambda: tdo.gather_nd(x, ib, 1), walks[1])
    it = make_indices((4, 2), x.shape[:3], torch.int64).to(DEV).transpose(0, 1)
    both(lambda: tdo.gather_nd(x, it), walks[2])


def test_gather_nd_triton_dml_form(both):
    x = torch.randn(1, 1, 4, 5, 6, device=DEV)
    i = make_indices((1, 1, 2, 3), (4, 5), torch.int64, True).to(DEV).reshape(1, 1, 2, 3, 2)
    both(lambda: tdo.gather_nd(x, i, input_dimension_count=3, indices_dimension_count=3))


@pytest.mark.parametrize("case", ["no_tuples", "empty_slice", "empty_batch"])
def test_gather_nd_triton_zero_size(backend, both, case):
    x, i, b = {
        "no_tuples": (torch.randn(3, 4), torch.zeros(0, 1, dtype=torch.int64), 0),
        "empty_slice": (torch.randn(3, 0), torch.tensor([[2], [0]]), 0),
        "empty_batch": (torch.randn(0, 3, 2), torch.zeros(0, 5, 1, dtype=torch.int64), 1),
    }[case]
    both(lambda: tdo.gather_nd(x.to(DEV), i.to(DEV), b))


def test_gather_nd_triton_many_programs(both, monkeypatch):
    """Small blocks: many programs in both grid axes, and partial blocks at every edge."""
    from torch_dml_ops.triton_kernels import gather_nd as kmod
    real = kmod.tuple_blocks
    monkeypatch.setattr(kmod, "tuple_blocks", lambda s, m, e: real(s, 16, e))
    x = torch.randn(7, 5, 37, device=DEV)
    i = make_indices((19,), (7, 5), torch.int64, negative=True).to(DEV)
    both(lambda: tdo.gather_nd(x, i))
    xe = torch.randn(9, 11, device=DEV)
    ie = make_indices((45,), (9, 11), torch.int32, negative=True).to(DEV)
    both(lambda: tdo.gather_nd(xe, ie))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
def test_gather_nd_triton_out_of_range(backend, index_dtype):
    backend("triton")
    x = torch.randn(4, 5, 6, device=DEV)
    i = torch.tensor([[[0, 1], [3, 4]], [[2, 5], [1, 1]]]).to(index_dtype).to(DEV)
    with pytest.raises(IndexError, match=r"value 5 at position \(1, 0, 1\)"):
        tdo.gather_nd(x, i)


def test_gather_nd_triton_failed_out_untouched(backend):
    backend("triton")
    x = torch.randn(4, 5, device=DEV)
    out = torch.full((2, 5), 7.0, device=DEV)
    with pytest.raises(IndexError, match="value -5"):
        tdo.gather_nd(x, torch.tensor([[1], [-5]], device=DEV), out=out)
    assert torch.equal(out, torch.full((2, 5), 7.0, device=DEV))
    tdo.gather_nd(x, torch.tensor([[1], [-4]], device=DEV), out=out)
    assert torch.equal(out, x[[1, 0]])


def test_gather_nd_triton_unchecked_out_of_range_reads_nothing(backend):
    """check_indices=False: no error, no out-of-bounds access; bad tuples produce zeros."""
    backend("triton")
    x = torch.randn(4, 5, device=DEV)
    i = torch.tensor([[1], [2**40], [-9], [3]], device=DEV)
    out = tdo.gather_nd(x, i, check_indices=False)
    assert torch.equal(out[0], x[1]) and torch.equal(out[3], x[3])
    assert torch.equal(out[1:3], torch.zeros(2, 5, device=DEV))


def test_gather_nd_triton_out_and_grad(backend, both):
    x = torch.randn(6, 4, dtype=torch.float64, device=DEV)
    i = make_indices((5,), (6,), torch.int64, negative=True).to(DEV)
    buf = torch.empty(5, 4, dtype=torch.float64, device=DEV)
    both(lambda: tdo.gather_nd(x, i, out=buf).clone())
    backend("triton")
    xr = x.clone().requires_grad_()
    tdo.gather_nd(xr, i).sum().backward()
    backend("torch")
    xt = x.clone().requires_grad_()
    tdo.gather_nd(xt, i).sum().backward()
    assert torch.equal(xr.grad, xt.grad)


@pytest.mark.gpu
@pytest.mark.slow
def test_gather_nd_triton_offsets_beyond_2_31(backend):
    """Byte offsets past 2**31 (int64 arithmetic in the kernel)."""
    backend("triton")
    x = torch.zeros(2**31 // 2 + 16, 2, dtype=torch.int16, device="cuda")  # 2**31 + 64 bytes
    x[-1] = torch.tensor([5, 6], dtype=torch.int16)
    out = tdo.gather_nd(x, torch.tensor([[x.shape[0] - 1], [-1], [0]], device="cuda"))
    assert out.tolist() == [[5, 6], [5, 6], [0, 0]]


def test_gather_nd_more_coordinates_than_the_kernel_takes(backend, launches):
    """Tuples of 9 coordinates (a 10-d input, allowed at the permissive level): the kernel takes
    8 sizes and strides, so the call runs the portable path, with the same answer."""
    g = torch.Generator().manual_seed(9)
    shape = (2,) * 10
    x = make_data(shape, torch.float32, g).to(DEV)
    i = make_indices((5,), shape[:9], torch.int64, True, g).to(DEV)
    backend("triton")
    got = tdo.gather_nd(x, i)
    assert not launches
    assert to_bits(got).tolist() == gather_nd_ref(x, i, 0).tolist()
    with pytest.raises(IndexError):
        tdo.gather_nd(x, torch.full((1, 9), 2, device=DEV))
