"""The portable path's own mechanisms (torch_dml_ops/portable/): its range-check plan, its
bounded caches, and the options of ``scatter_nd_torch`` (the caller's name, the deterministic
flag).  Its results against the oracles are tested with every backend's in tests/test_backends.py
and the per-op files (their ``portable_path`` fixtures force its strategies).
"""
import pytest
import torch

import torch_dml_ops as tdo
from torch_dml_ops.portable import _common, scatter_nd as portable_scatter
from torch_dml_ops.portable import top_k1 as portable_topk


@pytest.fixture(autouse=True)
def portable(backend):
    backend("torch")


# ---------------------------------------------------------------------------------------------
# The range-check plan
# ---------------------------------------------------------------------------------------------

def test_check_and_wrap_plan_refuses_to_delegate_an_overflowing_column0():
    """When ``(col0 + 1) * rows_per_col0`` passes the index dtype's range, column 0 cannot be
    left to the gather kernel: 46339 * 46340**2 wraps in int32 (no tensor that large is needed
    to check the plan itself)."""
    sizes = (1, 46340, 46340)             # 2147395600 rows: int32 linear rows
    idx2 = torch.tensor([[0, 1, 1], [46339, 1, 1]], dtype=torch.int32)
    names = [f"InputTensor dimension {d}" for d in range(3)]
    with pytest.raises(IndexError, match=r"value 46339 at position \(1, 0\) .* dimension 0 of "
                                         r"size 1; valid range \[-1, 0\]"):
        _common.check_and_wrap_plan("gather_nd", idx2, idx2, sizes, True, names, first=1)
    assert _common.check_and_wrap_plan("gather_nd", idx2[:1], idx2[:1], sizes, True, names,
                                       first=1) == [False] * 3
    # int64 linear rows cannot overflow here: column 0's upper bound is left to the kernel
    wide = idx2.long()
    assert _common.check_and_wrap_plan("gather_nd", wide, wide, sizes, True, names,
                                       first=1) == [False] * 3


# ---------------------------------------------------------------------------------------------
# Bounded caches
# ---------------------------------------------------------------------------------------------

def _caches(module):
    return {f"{module.__name__}.{name}": obj for name, obj in vars(module).items()
            if hasattr(obj, "cache_info")}


def test_every_cache_in_the_portable_path_is_bounded():
    import torch_dml_ops._forms as forms
    from torch_dml_ops.portable import gather_nd as portable_gather
    found = {}
    for module in (_common, portable_gather, portable_scatter, portable_topk, forms):
        found.update(_caches(module))
    assert "torch_dml_ops.portable.top_k1._chunk_plan" in found
    for name, fn in found.items():
        assert fn.cache_info().maxsize is not None, f"{name} is an unbounded cache"


def test_chunk_plan_cache_stays_bounded():
    plan = portable_topk._chunk_plan
    limit = plan.cache_info().maxsize
    assert limit is not None and limit <= 16384
    for n in range(300, 300 + 3 * limit):
        plan(n, 1 + n % 7, 1, 2, portable_topk.CHUNKED_MIN_ROW)
    info = plan.cache_info()
    assert info.currsize <= limit
    # the recursion still reuses its own entries (one call, ~log2(n) sub-plans): still fast,
    # and the answer does not depend on what the cache held
    plan.cache_clear()
    fresh = plan(1 << 20, 5, 1, 2, portable_topk.CHUNKED_MIN_ROW)
    assert plan.cache_info().currsize < 64
    for n in range(10_000, 10_000 + limit + 10):
        plan(n, 3, 1, 2, portable_topk.CHUNKED_MIN_ROW)
    assert plan(1 << 20, 5, 1, 2, portable_topk.CHUNKED_MIN_ROW) == fresh


def test_top_k1_many_distinct_rows_keep_the_cache_bounded():
    """The reported growth: top_k1 over rows of many distinct lengths (each plans ~log2(n)
    sub-plans) must recycle the planner's cache, not grow it."""
    plan = portable_topk._chunk_plan
    plan.cache_clear()
    limit = plan.cache_info().maxsize
    x = torch.randn(2, 600 + limit)
    for n in range(600, 600 + limit):
        tdo.top_k1(x[:, :n], 2 + n % 3)
    info = plan.cache_info()
    assert info.misses > limit, "the test did not plan more rows than the cache holds"
    assert info.currsize <= limit


# ---------------------------------------------------------------------------------------------
# scatter_nd_torch's caller-facing options
# ---------------------------------------------------------------------------------------------

def _layout(x, i):
    from torch_dml_ops._forms import gather_layout
    return gather_layout("scatter_nd", x.shape, i.shape, 0, None, None,
                         updates_name="UpdatesTensor")


def test_scatter_nd_torch_names_the_caller_in_errors():
    x, i = torch.zeros(4, 0), torch.tensor([[7]])
    with pytest.raises(IndexError, match=r"^scatter_nd_: IndicesTensor value 7 at position "):
        portable_scatter.scatter_nd_torch(x, i, torch.zeros(1, 0), _layout(x, i), "none",
                                          op="scatter_nd_")


def test_scatter_nd_torch_deterministic_argument_keeps_the_last_duplicate(monkeypatch):
    """``deterministic=True`` (the op's argument) without torch's global mode: an element
    scatter on the large path goes through the claim pass, so the last duplicate wins."""
    monkeypatch.setattr(portable_scatter, "SMALL_SCATTER", 16)
    assert not torch.are_deterministic_algorithms_enabled()
    x = torch.zeros(5)
    i = torch.tensor([0, 3, 1, 3, 0, 3] * 50).reshape(-1, 1)
    u = torch.arange(300.)
    want = x.clone()
    for t, r in enumerate(i[:, 0].tolist()):
        want[r] = u[t]
    seen = []
    real = portable_scatter.scatter_overwrite_rows
    monkeypatch.setattr(portable_scatter, "scatter_overwrite_rows",
                        lambda *a: seen.append(a[3]) or real(*a))
    got = portable_scatter.scatter_nd_torch(x.clone(), i, u, _layout(x, i), "none",
                                            deterministic=True)
    assert seen == [True] and torch.equal(got, want)
