"""The Triton scatter kernels, bit-identical to the portable path (interpreter on CPU, or CUDA).

Float add with duplicate tuples is compared with a tolerance: atomics add in an order that
legitimately differs from the portable path's index order.  Every other case is bit-exact.
"""
import pytest
import torch

import torch_dml_ops as tdo
from conftest import TRITON_DEVICE
from helpers import DATA_DTYPES, INDEX_DTYPES, make_data, make_indices
from reference import SCATTER_ND_EXAMPLE, to_bits
from test_scatter_nd import make_updates, unique_indices

pytestmark = pytest.mark.triton
DEV = TRITON_DEVICE
REDUCTIONS = ["none", "add", "mul", "max", "min"]


@pytest.fixture
def launches(monkeypatch):
    # the op kernels call the launcher by its name in the op's module
    from torch_dml_ops.triton_kernels import scatter_nd as tk
    calls = []
    real = tk.scatter_nd_triton

    def spy(*args, **kwargs):
        calls.append(args[4])
        return real(*args, **kwargs)
    monkeypatch.setattr(tk, "scatter_nd_triton", spy)
    return calls


@pytest.fixture
def both(backend, launches):
    """both(fn, exact=True, expect_kernel=True): portable result vs Triton backend result."""
    def run(fn, exact=True, expect_kernel=True):
        backend("torch")
        want = fn()
        backend("triton")
        got = fn()
        assert bool(launches) == expect_kernel, launches
        launches.clear()
        assert got.shape == want.shape and got.dtype == want.dtype
        if exact:
            assert torch.equal(torch.from_numpy(to_bits(got)), torch.from_numpy(to_bits(want)))
        else:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        return got
    return run


def _kernel_handles(dtype, reduction, deterministic=False):
    from torch_dml_ops.triton_kernels import scatter_nd_triton_supports
    return scatter_nd_triton_supports(dtype, reduction, deterministic)


def test_scatter_nd_triton_spec_example(backend):
    backend("triton")
    ex = SCATTER_ND_EXAMPLE
    out = tdo.scatter_nd(torch.tensor(ex["input"], dtype=torch.float32, device=DEV),
                         torch.tensor(ex["indices"], device=DEV),
                         torch.tensor(ex["updates"], dtype=torch.float32, device=DEV))
    assert out.cpu().tolist() == [float(v) for v in ex["output"]]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=str)
def test_scatter_nd_triton_dtypes_reductions(both, dtype, reduction):
    g = torch.Generator().manual_seed(1)
    x = make_data((5, 4, 3), dtype, g).to(DEV)
    i = unique_indices((2, 3), (5, 4), torch.int64, generator=g).to(DEV)
    u = make_updates(x.cpu(), i.cpu(), g).to(DEV)
    both(lambda: tdo.scatter_nd(x, i, u, reduction), expect_kernel=_kernel_handles(dtype, reduction))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("slice_shape", [(), (3,), (2, 5)], ids=["elements", "rows", "slices"])
def test_scatter_nd_triton_index_types_and_slices(both, index_dtype, slice_shape):
    g = torch.Generator().manual_seed(2)
    x = torch.randn((6, 5) + slice_shape, generator=g).to(DEV)
    i = unique_indices((4, 2), (6, 5), index_dtype, generator=g).to(DEV)
    u = make_updates(x.cpu(), i.cpu(), g).to(DEV)
    both(lambda: tdo.scatter_nd(x, i, u))
    both(lambda: tdo.scatter_nd(x, i, u, "add"))


@pytest.mark.parametrize("slice_len", [1, 4])
def test_scatter_nd_triton_duplicates_last_wins_deterministic(both, deterministic, slice_len):
    x = torch.zeros(5, slice_len, device=DEV)
    i = torch.tensor([[1], [3], [1], [-4], [3], [0], [1]], device=DEV)
    u = torch.arange(7 * slice_len, dtype=torch.float32, device=DEV).reshape(7, slice_len)
    got = both(lambda: tdo.scatter_nd(x, i, u))
    assert got[1].tolist() == u[6].tolist() and got[3].tolist() == u[4].tolist()


def test_scatter_nd_triton_duplicate_rows_never_mix(backend, launches):
    backend("triton")
    x = torch.zeros(3, 40, device=DEV)
    i = torch.tensor([[1]] * 30, device=DEV)
    u = torch.arange(30, dtype=torch.float32, device=DEV).unsqueeze(1).expand(30, 40).contiguous()
    row = tdo.scatter_nd(x, i, u)[1]
    assert launches and torch.all(row == row[0])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint32, torch.float32], ids=str)
@pytest.mark.parametrize("reduction", ["add", "max", "min"])
def test_scatter_nd_triton_atomic_reductions_with_duplicates(both, dtype, reduction):
    g = torch.Generator().manual_seed(4)
    x = make_data((4, 3), dtype, g).to(DEV)
    i = make_indices((9,), (4,), torch.int64, negative=True, generator=g).to(DEV)
    u = make_updates(x.cpu(), i.cpu(), g).to(DEV)
    exact = not dtype.is_floating_point or reduction != "add"
    both(lambda: tdo.scatter_nd(x, i, u, reduction), exact=exact,
         expect_kernel=_kernel_handles(dtype, reduction))


def test_scatter_nd_triton_float_add_deterministic_uses_ordered_path(both, deterministic):
    x = torch.randn(4, 3, device=DEV)
    i = torch.tensor([[1], [1], [2], [1]], device=DEV)
    u = torch.randn(4, 3, device=DEV)
    both(lambda: tdo.scatter_nd(x, i, u, "add"), expect_kernel=False)


def test_scatter_nd_triton_many_programs(both, monkeypatch):
    from torch_dml_ops.triton_kernels import scatter_nd as kmod
    real = kmod.tuple_blocks
    monkeypatch.setattr(kmod, "tuple_blocks", lambda s, m, e: real(s, 16, e))
    g = torch.Generator().manual_seed(9)
    x = torch.randn(9, 7, 37, generator=g).to(DEV)
    i = unique_indices((29,), (9, 7), torch.int32, generator=g).to(DEV)
    u = make_updates(x.cpu(), i.cpu(), g).to(DEV)
    both(lambda: tdo.scatter_nd(x, i, u))
    both(lambda: tdo.scatter_nd(x, i, u, "add"))
    xi = x.to(torch.int32)
    both(lambda: tdo.scatter_nd(xi, i, u.to(torch.int32), "max"))


@pytest.mark.parametrize("variant", ["functional", "out", "inplace"])
def test_scatter_nd_triton_out_of_range_modifies_nothing(backend, variant):
    backend("triton")
    x = torch.randn(4, 5, 3, device=DEV)
    i = torch.tensor([[0, 1], [3, -6], [2, 4]], device=DEV)
    u = torch.randn(3, 3, device=DEV)
    x0 = x.clone()
    out = torch.full_like(x, 7.0)
    with pytest.raises(IndexError, match=r"value -6 at position \(1, 1\)"):
        if variant == "functional":
            tdo.scatter_nd(x, i, u)
        elif variant == "out":
            tdo.scatter_nd(x, i, u, out=out)
        else:
            tdo.scatter_nd_(x, i, u)
    assert torch.equal(x, x0) and torch.equal(out, torch.full_like(x, 7.0))


def test_scatter_nd_triton_unchecked_skips_bad_tuples(backend):
    backend("triton")
    x = torch.zeros(4, 2, device=DEV)
    i = torch.tensor([[1], [2**40], [-9], [3]], device=DEV)
    u = torch.ones(4, 2, device=DEV)
    out = tdo.scatter_nd(x, i, u, check_indices=False)
    assert out.cpu().tolist() == [[0, 0], [1, 1], [0, 0], [1, 1]]


def test_scatter_nd_triton_inplace_strided_dml(both):
    def run():
        base = torch.zeros(1, 4, 6, device=DEV)
        view = base[:, :, ::2]
        tdo.scatter_nd_(view, torch.tensor([[[1, 2], [3, 0]]], device=DEV),
                        torch.tensor([[[5.0, 6.0]]], device=DEV),
                        input_dimension_count=2, indices_dimension_count=2)
        return base
    got = both(run)
    assert got[0, 1, 4] == 5.0 and got[0, 3, 0] == 6.0


def test_scatter_nd_triton_grad(backend):
    x = torch.randn(5, 3, dtype=torch.float64, device=DEV)
    i = torch.tensor([[4], [0]], device=DEV)
    u = torch.randn(2, 3, dtype=torch.float64, device=DEV)
    grads = []
    for name in ("torch", "triton"):
        backend(name)
        xr, ur = x.clone().requires_grad_(), u.clone().requires_grad_()
        (tdo.scatter_nd(xr, i, ur) * torch.arange(15., device=DEV, dtype=torch.float64).view(5, 3)).sum().backward()
        grads.append((xr.grad, ur.grad))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])


def test_scatter_nd_more_coordinates_than_the_kernel_takes(both):
    """Tuples of 9 coordinates (a 10-d target, allowed at the permissive level): the kernel takes
    8 sizes and strides, so the call runs the portable path, bit for bit."""
    g = torch.Generator().manual_seed(9)
    shape = (2,) * 10
    x = make_data(shape, torch.float32, g).to(DEV)
    i = torch.tensor([[0, 1, 0, 1, 0, 1, 0, 1, 0], [1, 1, 1, 1, 1, 1, 1, 1, -1]], device=DEV)
    u = make_data((2, 2), torch.float32, g).to(DEV)
    for reduction in ("none", "add"):
        both(lambda: tdo.scatter_nd(x, i, u, reduction), expect_kernel=False)
