"""Strided views as inputs and targets: permuted, sliced and transposed tensors, read and written
through their strides.

The case that matters is transformers' KV cache ``[batch, heads, positions, dim]`` written at
one position (its ``StaticLayer.update`` uses ``index_copy_(2, pos, k)``), which in ScatterND
form is ``scatter_nd_(keys.permute(2, 0, 1, 3), pos[:, None], k.permute(2, 0, 1, 3))``: the
results must equal those of the same call on a contiguous copy, bit for bit, on every backend,
and the C++ and portable paths must move the addressed rows only (no contiguous copy of the
input or of the target; the benchmark's numbers are in docs/benchmarks.md, "Strided views").
"""
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_dml_ops as tdo
from helpers import make_data
from reference import gather_nd_ref, scatter_nd_ref, to_bits


def assert_bits_equal(actual, expected):
    assert actual.shape == tuple(expected.shape)
    assert (to_bits(actual) == expected).all() if not isinstance(expected, torch.Tensor) else \
        (to_bits(actual) == to_bits(expected)).all()

REDUCTIONS = ["none", "add", "mul", "max", "min"]
DTYPES = [torch.float32, torch.bfloat16, torch.float64, torch.int32, torch.uint16, torch.int8,
          torch.bool]


def _views(seed):
    """(base, view_of) pairs: a random tensor of 2-4 dimensions seen permuted, sliced (a
    narrower window of a larger base) or transposed, never contiguous."""
    g = torch.Generator().manual_seed(seed)
    nd = int(torch.randint(2, 5, (), generator=g))
    shape = [int(s) for s in torch.randint(1, 5, (nd,), generator=g)]
    perm = [int(p) for p in torch.randperm(nd, generator=g)]
    if perm == list(range(nd)):
        perm = perm[::-1]
    sliced = seed % 2 == 0
    base_shape = [s + 1 for s in shape] if sliced else shape

    def view_of(base):
        v = base[tuple(slice(0, s) for s in shape)] if sliced else base
        return v.permute(perm)
    return base_shape, view_of, g


def _tuples(x, k, n, g):
    cols = [torch.randint(-x.shape[j], x.shape[j], (n,), generator=g) for j in range(k)]
    return torch.stack(cols, -1)


@pytest.mark.parametrize("seed", range(24))
def test_gather_from_any_view_equals_the_reference(any_backend, dev, seed):
    base_shape, view_of, g = _views(seed)
    x = view_of(make_data(base_shape, torch.float32, g).to(dev))
    k = int(torch.randint(1, x.dim() + 1, (), generator=g))
    idx = _tuples(x, k, 5, g).to(dev)
    assert_bits_equal(tdo.gather_nd(x, idx), gather_nd_ref(x.cpu().contiguous(), idx.cpu()))


@pytest.mark.parametrize("batch_dims", [1, 2])
def test_gather_batch_dims_that_do_not_merge(any_backend, dev, batch_dims):
    """Batch dimensions whose strides do not collapse into one (a transpose of them)."""
    x = make_data((3, 4, 5, 6), torch.float32).to(dev).transpose(0, 1)   # [4, 3, 5, 6]
    if batch_dims == 2:
        idx = torch.tensor([[[[1], [-2]]] * 3] * 4).to(dev)              # [4, 3, 2, 1]
    else:
        idx = torch.stack([_tuples(x[0], 2, 3, torch.Generator().manual_seed(b))
                           for b in range(4)]).to(dev)                   # [4, 3, 2]
    assert_bits_equal(tdo.gather_nd(x, idx, batch_dims=batch_dims),
                      gather_nd_ref(x.cpu().contiguous(), idx.cpu(), batch_dims))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("seed", range(6))
def test_scatter_into_any_view_equals_the_reference(any_backend, dev, dtype, reduction, seed):
    """In place and ``out=``, duplicates included, bit for bit the same call on a contiguous
    copy (whose results the per-op files test against the oracles); nothing outside the view
    changes."""
    base_shape, view_of, g = _views(seed)
    base = make_data(base_shape, dtype, g).to(dev)
    x = view_of(base.clone())
    k = int(torch.randint(1, x.dim() + 1, (), generator=g))
    idx = _tuples(x, k, 9, g).to(dev)                       # 9 tuples: duplicates likely
    upd = make_data((9,) + tuple(x.shape[k:]), dtype, g).to(dev)
    want = tdo.scatter_nd_(x.clone(memory_format=torch.contiguous_format), idx, upd,
                           reduction=reduction).cpu()
    if dtype in (torch.float32, torch.int32):
        assert_bits_equal(want, scatter_nd_ref(x.cpu().clone(), idx.cpu(), upd.cpu(),
                                               reduction))

    target_base = base.clone()
    target = view_of(target_base)
    tdo.scatter_nd_(target, idx, upd, reduction=reduction)
    assert_bits_equal(target, want)
    untouched = target_base.cpu().clone()
    view_of(untouched).copy_(view_of(base.cpu()))
    assert torch.equal(untouched, base.cpu())   # only the view's elements were written

    out = torch.empty(tuple(reversed(x.shape)), dtype=dtype, device=dev).permute(
        *reversed(range(x.dim())))                          # a transposed out=
    tdo.scatter_nd(x, idx, upd, reduction=reduction, out=out)
    assert_bits_equal(out, want)


def test_scatter_into_a_view_with_dimension_counts(any_backend, dev):
    """DirectML's right-aligned DimensionCounts over a strided target: the natural form drops
    the target's leading size-1 dimension."""
    cache = make_data((1, 6, 2, 3), torch.float32).to(dev)
    idx = torch.tensor([[1, 4], [0, -1], [1, 4]]).to(dev)
    upd = make_data((3, 3), torch.float32).to(dev)
    for reduction in ("none", "add"):
        want = scatter_nd_ref(cache.permute(0, 2, 1, 3)[0].cpu().contiguous(), idx.cpu(),
                              upd.cpu(), reduction)
        target = cache.clone().permute(0, 2, 1, 3)                    # [1, 2, 6, 3]
        assert not target.is_contiguous()
        tdo.scatter_nd_(target, idx.view(1, 1, 3, 2), upd.view(1, 1, 3, 3),
                        reduction=reduction, input_dimension_count=3, indices_dimension_count=2)
        assert torch.equal(target[0].cpu(), want)
        target = cache.clone().permute(0, 2, 1, 3)
        tdo.scatter_nd_(target[0], idx, upd, reduction=reduction)
        assert torch.equal(target[0].cpu(), want)


def _kv_cache(dtype=torch.float32):
    keys = make_data((2, 4, 64, 16), dtype)                 # [batch, heads, positions, dim]
    pos = torch.tensor([5, 9])
    k = make_data((2, 4, 2, 16), dtype)
    return keys, pos, k


def test_kv_cache_write_and_read_match_index_copy_and_index_select(any_backend, dev):
    keys, pos, k = (t.to(dev) for t in _kv_cache())
    want = keys.clone().index_copy_(2, pos, k)
    target = keys.clone()
    tdo.scatter_nd_(target.permute(2, 0, 1, 3), pos[:, None], k.permute(2, 0, 1, 3))
    assert torch.equal(target, want)
    got = tdo.gather_nd(target.permute(2, 0, 1, 3), pos[:, None])
    assert torch.equal(got, want.index_select(2, pos).permute(2, 0, 1, 3))


_COPIES = {"aten::clone", "aten::contiguous", "aten::copy_", "aten::empty_like"}


def _profiled(fn):
    """(the aten ops ``fn`` ran, the bytes it allocated), nested calls included."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = prof.events()
    return {e.name for e in events}, sum(max(e.cpu_memory_usage, 0) for e in events)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("path", ["native", "torch"])
def test_no_copy_of_a_strided_target_or_input(backend, path, reduction):
    """The permuted-cache write and read move what their tuples address: allocations far below
    the 64 KiB cache's size and, in C++, no clone, contiguous or copy_ at all (before: a
    contiguous copy of the cache per call, written back whole; the portable path copies its
    small row buffers with torch ops)."""
    if path == "native":
        from conftest import CPP_KERNELS, NATIVE_OK
        if not NATIVE_OK:
            pytest.skip("the C++ extension is not built")
        assert CPP_KERNELS["scatter_nd_"] and CPP_KERNELS["gather_nd"]
    backend(path)
    keys, pos, k = _kv_cache()
    cache, upd, idx = keys.permute(2, 0, 1, 3), k.permute(2, 0, 1, 3), pos[:, None]
    upd = upd.contiguous()                                  # (the updates' own copy is not at issue)
    size = keys.numel() * keys.element_size()
    ops, allocated = _profiled(lambda: tdo.scatter_nd_(cache, idx, upd, reduction=reduction))
    assert path == "torch" or not ops & _COPIES, ops
    assert allocated < size // 4, (allocated, size)
    if reduction == "none":
        ops, allocated = _profiled(lambda: tdo.gather_nd(cache, idx))
        assert path == "torch" or not ops & _COPIES, ops
        assert allocated <= 2 * upd.numel() * upd.element_size() + 1024, (allocated, size)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_skipped_tuples_into_a_view(any_backend, dev, reduction):
    """``check_indices=False`` into a strided target: the out-of-range tuples are skipped, the
    others applied in index order, as into a contiguous copy (every row once a skipped tuple's
    neighbour, the last row included, where the renumbered buffer's repeats live)."""
    keys = make_data((2, 3, 8, 4), torch.float32).to(dev)
    pos = torch.tensor([[7], [9], [0], [7], [-9], [3], [7]]).to(dev)   # 9 and -9: out of range
    upd = make_data((7, 2, 3, 4), torch.float32).to(dev)
    want = keys.permute(2, 0, 1, 3).clone(memory_format=torch.contiguous_format)
    tdo.scatter_nd_(want, pos, upd, reduction=reduction, check_indices=False)
    target = keys.clone()
    tdo.scatter_nd_(target.permute(2, 0, 1, 3), pos, upd, reduction=reduction,
                    check_indices=False)
    assert_bits_equal(target.permute(2, 0, 1, 3), want)
    only_bad = torch.tensor([[8], [-9]]).to(dev)
    target = keys.clone()
    tdo.scatter_nd_(target.permute(2, 0, 1, 3), only_bad, upd[:2], reduction=reduction,
                    check_indices=False)
    assert torch.equal(target, keys)


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_unchecked_gather_from_a_view_as_on_cuda(monkeypatch, backend, batch_dims):
    """``check_indices=False`` on the portable path as it runs on CUDA (every tuple masked, no
    host read): a strided input is read through its strides, bad tuples give zeros, no copy of
    the input."""
    from torch_dml_ops.portable import gather_nd as pg
    monkeypatch.setattr(pg, "torch_checks_bounds", lambda t: False)
    backend("torch")
    keys = make_data((2, 4, 64, 16), torch.float32)
    cache = keys.permute(0, 2, 1, 3) if batch_dims else keys.permute(2, 0, 1, 3)
    pos = torch.tensor([[5], [70], [-1]]) if not batch_dims else torch.tensor([[[5], [70]],
                                                                              [[-1], [3]]])
    got = tdo.gather_nd(cache, pos, batch_dims=batch_dims, check_indices=False)
    flat = pos.reshape(-1, 1)
    ok = ((flat[:, 0] >= -64) & (flat[:, 0] < 64)).numpy()
    safe = torch.where(torch.from_numpy(ok)[:, None], flat, 0).reshape(pos.shape)
    want = gather_nd_ref(cache.contiguous(), safe, batch_dims).reshape(len(flat), -1)
    bits = to_bits(got).reshape(len(flat), -1)
    assert (bits[ok] == want[ok]).all() and (bits[~ok] == 0).all()
    ops, allocated = _profiled(lambda: tdo.gather_nd(cache, pos, batch_dims=batch_dims,
                                                     check_indices=False))
    assert allocated < keys.numel() * keys.element_size() // 4, allocated
