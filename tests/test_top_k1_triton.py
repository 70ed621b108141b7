"""The Triton top-k kernels, bit-identical to the portable path (interpreter on CPU, or CUDA):
the one-pass kernel for rows that fit in a block and the multi-stage merge for longer rows."""
import pytest
import torch

import torch_dml_ops as tdo
from conftest import TRITON_DEVICE
from helpers import DATA_DTYPES, make_data
from reference import TOP_K1_EXAMPLES, to_bits

pytestmark = pytest.mark.triton
DEV = TRITON_DEVICE
DIRS = ["decreasing", "increasing"]


@pytest.fixture
def launches(monkeypatch):
    # the op kernels call the launcher by its name in the op's module
    from torch_dml_ops.triton_kernels import top_k1 as tk
    calls = []
    real = tk.top_k1_triton

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(tk, "top_k1_triton", spy)
    return calls


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 16 keys: long rows go through several merge stages."""
    from torch_dml_ops.triton_kernels import top_k1 as kmod
    monkeypatch.setattr(kmod, "DEFAULT_BLOCK", 16)


@pytest.fixture
def both(backend, launches):
    def run(x, k, axis=-1, direction="decreasing", index_dtype=torch.int64, expect_kernel=True):
        backend("torch")
        want = tdo.top_k1(x, k, axis, direction, index_dtype)
        backend("triton")
        got = tdo.top_k1(x, k, axis, direction, index_dtype)
        assert bool(launches) == expect_kernel
        launches.clear()
        assert torch.equal(torch.from_numpy(to_bits(got.values)), torch.from_numpy(to_bits(want.values)))
        assert got.indices.dtype == want.indices.dtype and torch.equal(got.indices.cpu(), want.indices.cpu())
        return got
    return run


@pytest.mark.parametrize("ex", TOP_K1_EXAMPLES, ids=lambda e: e["name"])
def test_top_k1_triton_spec_examples(backend, ex):
    backend("triton")
    x = torch.tensor(ex["input"], dtype=torch.float32, device=DEV)
    res = tdo.top_k1(x, ex["k"], ex["axis"], ex["direction"], index_dtype=torch.uint32)
    assert res.values.cpu().tolist() == [[[[float(v) for v in r] for r in ex["values"][0][0]]]]
    assert res.indices.cpu().to(torch.int64).tolist() == ex["indices"]


@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=str)
def test_top_k1_triton_dtypes(both, dtype, direction):
    g = torch.Generator().manual_seed(3)
    x = make_data((3, 37), dtype, g)
    if not dtype.is_floating_point and dtype != torch.bool:
        x = torch.randint(0, 9, (3, 37), generator=g).to(dtype)
    handled = dtype not in (torch.float64, torch.int64)
    for k in (1, 6, 37):
        both(x.to(DEV), k, -1, direction, expect_kernel=handled)


@pytest.mark.parametrize("direction", DIRS)
def test_top_k1_triton_special_values(both, direction):
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([0.0, nan, -0.0, inf, -inf, 1.0, -nan, 0.0, -1.0, -0.0] * 3)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for k in (1, 3, 7, 30):
            both(x.to(dtype).to(DEV), k, 0, direction)
    u = torch.tensor([0, 2**32 - 1, 2**31, 2**31 - 1, 5, 2**32 - 1], dtype=torch.int64).to(torch.uint32)
    both(u.to(DEV), 4, 0, direction)


@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("n,k", [(17, 1), (40, 3), (100, 8), (257, 5), (64, 8)])
def test_top_k1_triton_multi_stage(both, small_blocks, direction, n, k):
    g = torch.Generator().manual_seed(n + k)
    x = torch.randint(0, 6, (3, n), generator=g).float()        # ties across blocks
    both(x.to(DEV), k, -1, direction)
    both(torch.randn(2, n, generator=g).to(DEV), k, -1, direction, torch.uint32)


def test_top_k1_triton_axes_and_layouts(both):
    x = torch.randint(0, 4, (4, 5, 6), dtype=torch.int16).to(DEV)
    for axis in (0, 1, 2, -1):
        both(x, 2, axis, "decreasing", torch.int32)
        both(x.transpose(0, 2), 3, axis, "increasing")


def test_top_k1_triton_k_too_large_for_a_block_uses_portable(both, monkeypatch):
    from torch_dml_ops.triton_kernels import top_k1 as kmod
    monkeypatch.setattr(kmod, "MAX_BLOCK", 16)
    x = torch.randn(2, 40).to(DEV)
    both(x, 20, expect_kernel=False)
    both(x, 8)


def test_top_k1_triton_grad(backend):
    x = torch.randperm(30, dtype=torch.float64).reshape(3, 10).to(DEV)
    grads = []
    for name in ("torch", "triton"):
        backend(name)
        xr = x.clone().requires_grad_()
        (tdo.top_k1(xr, 3).values * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, device=DEV)).sum().backward()
        grads.append(xr.grad)
    assert torch.equal(grads[0], grads[1])


# ------------------------------------------------------------------ rows too long for the key

def test_top_k1_supports_refuses_rows_beyond_the_key():
    from torch_dml_ops.triton_kernels import top_k1 as kmod
    assert kmod.MAX_ROW == 2**32
    assert kmod.top_k1_triton_supports(torch.float32, 5, 2**32)
    assert not kmod.top_k1_triton_supports(torch.float32, 5, 2**32 + 1)
    assert not kmod.top_k1_triton_supports(torch.uint8, 1, 2**40)
    x = torch.zeros(1).expand(2**32 + 5)             # no memory behind it
    assert not kmod.top_k1_triton_supports(x.dtype, 1, x.shape[0])
    assert kmod.top_k1_triton_supports(x.dtype, 1, 2**31)
    for dtype in (torch.int64, torch.uint64, torch.float64):
        assert not kmod.top_k1_triton_supports(dtype, 1, 10)


def test_top_k1_launcher_refuses_rows_beyond_the_key():
    """Should a caller skip the check, the launcher refuses before it copies or launches."""
    from torch_dml_ops.triton_kernels import top_k1 as kmod
    x = torch.zeros(1, device=DEV).expand(3, 2**32 + 5).t()
    with pytest.raises(ValueError, match=r"4294967301 elements along axis 0\) .* at most "
                                         r"4294967296 elements"):
        kmod.top_k1_triton(x, 1, 0, True, torch.int64)


def test_top_k1_row_at_most_max_row_runs_the_kernel(backend, launches):
    """The public op runs the kernel for ordinary rows (the limit refuses nothing else)."""
    backend("triton")
    x = torch.randn(3, 50, device=DEV)
    v, i = tdo.top_k1(x, 4)
    assert launches
    assert torch.equal(i.cpu(), torch.topk(x.cpu(), 4, sorted=True).indices)
