"""Every backend through the dispatcher, against the oracles (tests/reference.py and the
plain-Python ones here) and against the portable path.

The ``any_backend`` fixture (conftest.py) enters ``torch_dml_ops._backend.override(name)`` for the test:
``torch`` (the portable path), ``native`` (the C++ kernels on the CPU; skipped where the extension
is not built) and ``triton`` (CUDA, or the CPU through triton's interpreter, which is slow: the
large grids run a subset under it, chosen where they are parametrized by ``over_backends``).
A test that compares a backend with the portable path runs for ``native`` and ``triton`` only.

1. the index range: coordinates whose linearized row overflows, indices into empty slices, the
   smallest bad position reported, one message on every backend (``raise_index_error``), the
   caller's tensors untouched by a failing call;
2. zero-size tensors;
3. gather_nd and scatter_nd: dtypes, ranks, batch dims, the DML form, layouts, duplicates;
4. top_k1: dtypes, NaN payloads, axes, ranks, layouts;
5. uint64 data: unsigned wraparound and order, values above 2**63;
6. tensors whose storage was resized away (``untyped_storage().resize_(0)``);
7. the C++ kernels on torch's thread pool: results independent of ``torch.set_num_threads``
   on inputs large enough to be split, and absurd thread counts.

What is specific to one backend's mechanism is tested in its own file: tests/test_portable.py
(the portable path's plans, thresholds and caches), tests/test_*_triton.py (the launchers and
their limits); tests/test_entry_points.py calls the C++ kernels below the public functions.
"""
import re

import numpy as np

import pytest
import torch

import torch_dml_ops as tdo
from torch_dml_ops._checks import raise_index_error

from conftest import BACKENDS, NATIVE_OK, backend_param, require_cpp_kernel
from helpers import DATA_DTYPES, INDEX_DTYPES, make_data, make_indices, split_rows
from reference import gather_nd_ref, scatter_nd_ref, to_bits, top_k1_ref

ParameterSet = type(pytest.param(None))
U64 = 2**64
REDUCTIONS = ["none", "add", "mul", "max", "min"]
DIRS = ["decreasing", "increasing"]
TOPK_INDEX = [torch.int64, torch.int32, torch.uint32]


# =============================================================================================
# Parametrization and comparison helpers
# =============================================================================================

def _id(v) -> str:
    if isinstance(v, torch.dtype):
        return str(v).replace("torch.", "")
    if isinstance(v, tuple):
        return "x".join(map(str, v))
    return str(v)


def over_backends(argnames: str, cases, triton=True, native=True, only=BACKENDS):
    """``parametrize("any_backend,<argnames>")`` over backends x cases (the fixture indirectly).

    ``triton``, ``native``: which cases run under that backend: all (True), none (False), or
    those a predicate of the case's values accepts.  ``only``: the backends at all."""
    keep = {"torch": True, "native": native, "triton": triton}
    params = []
    for name in only:
        for case in cases:
            if isinstance(case, ParameterSet):
                values, cid, marks = tuple(case.values), case.id, tuple(case.marks)
            else:
                values = case if isinstance(case, tuple) else (case,)
                cid, marks = None, ()
            rule = keep[name]
            if not (rule is True or (callable(rule) and rule(*values))):
                continue
            base = backend_param(name, *values)
            cid = cid or "-".join(_id(v) for v in values)
            params.append(pytest.param(*base.values, marks=tuple(base.marks) + marks,
                                       id=f"{name}-{cid}" if cid else name))
    names = "any_backend" + (f",{argnames}" if argnames else "")
    return pytest.mark.parametrize(names, params, indirect=["any_backend"])


#: A test that compares a backend with the portable path: the other backends.
OTHERS = ("native", "triton")


def u64(values, shape=None, device="cpu") -> torch.Tensor:
    """A uint64 tensor holding Python ints in [0, 2**64), built through int64 bits."""
    t = torch.tensor([v - U64 if v >= 2**63 else v for v in values], dtype=torch.int64)
    t = t.view(torch.uint64)
    return (t if shape is None else t.reshape(shape)).to(device)


def as_ints(t: torch.Tensor) -> list:
    """Exact Python ints of a uint64 tensor (row-major)."""
    return [v % U64 for v in t.detach().cpu().contiguous().view(torch.int64).reshape(-1).tolist()]


def idx(values, dtype, shape, device="cpu") -> torch.Tensor:
    """Indices of ``dtype`` from Python ints (uint64 values >= 2**63 through int64 bits)."""
    if dtype == torch.uint64:
        return u64(values, shape, device)
    return torch.tensor(values, dtype=torch.int64).to(dtype).reshape(shape).to(device)


def make_index_tensor(values, dtype, k, device="cpu") -> torch.Tensor:
    """``[len(values) // k, k]`` indices of ``dtype`` from Python ints."""
    return idx(values, dtype, (-1, k), device)


def bits_equal(a: torch.Tensor, b: torch.Tensor, what: str = "") -> None:
    assert tuple(a.shape) == tuple(b.shape), f"{what}: shapes {tuple(a.shape)} vs {tuple(b.shape)}"
    assert a.dtype == b.dtype, f"{what}: dtypes {a.dtype} vs {b.dtype}"
    np.testing.assert_array_equal(to_bits(a), to_bits(b), err_msg=what)


def bits_equal_ref(actual: torch.Tensor, expected_bits: np.ndarray) -> None:
    got = to_bits(actual)
    assert got.shape == expected_bits.shape, (got.shape, expected_bits.shape)
    np.testing.assert_array_equal(got, expected_bits)


def strided_like(t: torch.Tensor) -> torch.Tensor:
    """A non-contiguous tensor with t's values (every other element of a wider tensor)."""
    if t.dim() == 0:
        return t
    wide = torch.zeros(t.shape[:-1] + (2 * t.shape[-1],), dtype=t.dtype, device=t.device)
    wide[..., ::2] = t
    s = wide[..., ::2]
    assert not s.is_contiguous() or t.numel() <= 1
    return s


@pytest.fixture
def launches(any_backend, monkeypatch):
    """Under Triton, the launchers that ran (by name); empty for the other backends."""
    calls = []
    if any_backend == "triton":
        from torch_dml_ops.triton_kernels import gather_nd as tg, scatter_nd as ts, top_k1 as tt
        for mod, name in ((tg, "gather_nd_triton"), (ts, "scatter_nd_check_triton"),
                          (ts, "scatter_nd_triton"), (tt, "top_k1_triton")):
            real = getattr(mod, name)

            def spy(*args, _real=real, _name=name, **kwargs):
                calls.append(_name)
                return _real(*args, **kwargs)
            monkeypatch.setattr(mod, name, spy)
    return calls


def _outcome(fn):
    try:
        return "ok", fn()
    except Exception as e:      # compared across backends
        return "raise", e


def _same(a, b, what, computed_nan=False):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), what
        for x, y in zip(a, b):
            _same(x, y, what, computed_nan)
        return
    if computed_nan and a.is_floating_point():
        # The payload of a NaN out of a float16/bfloat16 reduction is not part of the contract:
        # torch's own CPU reductions go through float32 and write 0xFFFF on their vectorized
        # paths and 0x7FC0 on their scalar ones, whatever NaN came in; the C++ kernel keeps the
        # NaN it selected (max/min) and writes 0x7FC0 for a computed one (add/mul).  Where the
        # NaNs are must agree; every other element bit for bit.
        nan_a, nan_b = torch.isnan(a), torch.isnan(b)
        assert torch.equal(nan_a, nan_b), f"{what}: NaN positions differ"
        bits_equal(a.masked_fill(nan_a, 0), b.masked_fill(nan_b, 0), what)
        return
    bits_equal(a, b, what)


@pytest.fixture
def both(any_backend, backend, launches):
    """``both(fn, kernel=None, computed_nan=False)``: fn() under the portable path, then under the
    backend under test; the outcomes (the results' bits, shapes and dtypes, or the exception's
    type and message) must be identical (``computed_nan``: but for the payloads of NaNs that
    float arithmetic computed, see ``_same``).  ``kernel``: under Triton, whether a launcher must
    (True) or must not (False) have run; None: not checked.  Returns the backend's outcome."""
    def run(fn, kernel=None, computed_nan=False):
        backend("torch")
        want = _outcome(fn)
        launches.clear()
        backend(any_backend)
        got = _outcome(fn)
        if kernel is not None and any_backend == "triton":
            assert bool(launches) == kernel, f"Triton launchers run: {launches}"
        assert got[0] == want[0], \
            f"{any_backend} {got[0]}s ({got[1]!r}), portable {want[0]}s ({want[1]!r})"
        if want[0] == "raise":
            assert type(got[1]) is type(want[1]) and str(got[1]) == str(want[1])
        else:
            _same(got[1], want[1], f"{any_backend} vs portable", computed_nan)
        return got
    return run


@pytest.fixture
def errors(both):
    """``errors(fn)``: the IndexError message of fn(), the same on the portable path and the
    backend under test."""
    def run(fn):
        kind, e = both(fn)
        assert kind == "raise" and isinstance(e, IndexError), (kind, e)
        return str(e)
    return run


def cpp_covers(any_backend, *ops):
    """A test of a call the C++ kernels must cover themselves: under ``native`` they must be
    registered (it fails until they are)."""
    if any_backend == "native":
        require_cpp_kernel(*ops)


# =============================================================================================
# 0. Choosing the backend
# =============================================================================================

def test_no_public_runtime_backend_switch():
    """Switching backends re-registers dispatcher kernels, which is not safe while other threads
    dispatch (issue 19: concurrent calls failed with internal asserts or ran another op's
    kernel), so the switch is private (tests, benchmark, demo); the environment variable, read
    once at import, selects a backend for the process."""
    assert not hasattr(tdo, "backend") and "backend" not in tdo.__all__
    assert tdo.current_backend() == "auto"


def test_calls_from_many_threads_agree():
    """Four threads calling every op concurrently (the C++ kernels, torch's thread pool) get
    exactly the single-threaded results."""
    import threading
    x = torch.randn(64, 33)
    idx = torch.randint(-64, 64, (50, 1))
    upd = torch.randn(50, 33)
    want = (tdo.gather_nd(x, idx), tdo.scatter_nd(x, idx, upd, "add"), tdo.top_k1(x, 5))
    failures = []

    def work():
        try:
            for _ in range(200):
                got = (tdo.gather_nd(x, idx), tdo.scatter_nd(x, idx, upd, "add"), tdo.top_k1(x, 5))
                target = x.clone()
                tdo.scatter_nd_(target, idx, upd, "add")
                assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
                assert torch.equal(target, want[1])
                assert all(torch.equal(a, b) for a, b in zip(got[2], want[2]))
        except Exception as e:      # reported below, with the thread's exception
            failures.append(repr(e))
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]


def test_backend_blocks_nest_and_restore():
    """The private switch the tests use (``_backend.override``)."""
    assert tdo.current_backend() == "auto"
    x = torch.tensor([1.0, 3.0, 2.0, 3.0])
    with tdo._backend.override("torch") as outer:
        assert outer == "torch" == tdo.current_backend()
        inner = "native" if NATIVE_OK else "torch"
        with tdo._backend.override(inner):
            assert tdo.current_backend() == inner
            assert tdo.gather_nd(x, torch.tensor([[1]])).tolist() == [3.0]
        assert tdo.current_backend() == "torch"
        assert tdo.top_k1(x, 2).indices.tolist() == [1, 3]
    assert tdo.current_backend() == "auto"
    with pytest.raises(ValueError, match="backend 'cuda' is not one of auto, torch, triton, "
                                         "native"):
        tdo._backend.override("cuda")
    assert tdo.current_backend() == "auto"


def test_environment_variable_is_read_once_at_import(monkeypatch):
    """TORCH_DML_OPS_BACKEND selects the backend for the process when the package is imported;
    changing it later switches nothing (tests use ``torch_dml_ops._backend.override``); a bad name is
    refused (at import: ``apply_environment``)."""
    import os
    import subprocess
    import sys
    from torch_dml_ops import _backend
    script = """
import os, torch, torch_dml_ops as tdo
assert tdo.current_backend() == "torch", tdo.current_backend()
os.environ["TORCH_DML_OPS_BACKEND"] = "native"
assert tdo.current_backend() == "torch"
x = torch.arange(6.).reshape(3, 2)
assert tdo.gather_nd(x, torch.tensor([[2]])).tolist() == [[4., 5.]]
with tdo._backend.override("auto"):
    assert tdo.current_backend() == "auto"
assert tdo.current_backend() == "torch"
print("ok")
"""
    env = dict(os.environ, TORCH_DML_OPS_BACKEND="torch")
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stdout + res.stderr
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", "fastest")
    assert tdo.current_backend() == "auto"
    with pytest.raises(ValueError, match="^TORCH_DML_OPS_BACKEND='fastest' is not one of auto, "
                                         "torch, triton, native$"):
        _backend.apply_environment()
    assert tdo.current_backend() == "auto"


# =============================================================================================
# 1. The index range
# =============================================================================================

def index_ints(indices: torch.Tensor) -> list:
    """The index values as exact Python ints, flattened (uint64 above 2**63 included)."""
    if indices.dtype == torch.uint64:
        return as_ints(indices)
    return indices.cpu().to(torch.int64).reshape(-1).tolist()


def first_bad(indices: torch.Tensor, sizes) -> int:
    """Smallest row-major position of an out-of-range coordinate (signed types wrap once)."""
    vals = index_ints(indices)
    k = len(sizes)
    signed = indices.dtype in (torch.int64, torch.int32)
    for pos, v in enumerate(vals):
        v, s = int(v), sizes[pos % k]
        lo = -s if signed else 0
        if not lo <= v < s:
            return pos
    return -1


def expected_message(op, indices, sizes, batch_dims=0) -> str:
    """The IndexError every backend raises (natural form): ``raise_index_error`` at the
    oracle's position."""
    pos = first_bad(indices, sizes)
    assert pos >= 0, "the oracle found no bad index"
    names = [f"InputTensor dimension {d}" for d in range(batch_dims, batch_dims + len(sizes))]
    with pytest.raises(IndexError) as e:
        raise_index_error(op, indices.cpu(), pos, indices.shape, sizes, names,
                          indices.dtype in (torch.int64, torch.int32), len(sizes))
    return str(e.value)


PATHS = ("small", "large")


def small_path(*case) -> bool:
    """The "large" path lowers the portable path's thresholds, nothing else: the other backends
    run the "small" cases only (their own large inputs are tested below with 3000 tuples)."""
    return case[-1] == "small"


def tuples_for(path, monkeypatch) -> int:
    """The number of tuples for a path: "small" (12: the portable path's one advanced-indexing
    call) or "large" (300, with the portable thresholds lowered to 16 so that it linearizes,
    then index_select / index_add_ / scatter_reduce_)."""
    if path == "large":
        from torch_dml_ops.portable import gather_nd as pg, scatter_nd as ps
        monkeypatch.setattr(pg, "SMALL_TUPLES", 16)
        monkeypatch.setattr(pg, "SMALL_ELEMENTS", 16)
        monkeypatch.setattr(ps, "SMALL_SCATTER", 16)
        return 300
    return 12


# values out of range for every dimension used below (sizes < 8), including those that wrap to a
# valid row when multiplied by a row stride in the index's own width
BAD_VALUES = {
    torch.int32: [2**30, 2**31 - 1, -2**31, -2**30, 8],
    torch.int64: [2**62, -2**62, 2**63 - 1, -2**63, -9],
    torch.uint32: [2**31, 2**32 - 1, 8],
    torch.uint64: [2**62, 2**63, U64 - 1, 8],
}
CASES = [((5, 4), 2), ((5, 4, 3), 3), ((6, 5, 2), 2), ((7, 3, 2, 2), 1)]
CASE_COLUMNS = [(shape, k, j) for shape, k in CASES for j in range(k)]


def tuples_with_bad(n, shape, k, j, bad, dtype, at=None, second=None, device="cpu"):
    """n tuples, all valid ([1, 1, ...]), with coordinate j of tuple ``at`` set to ``bad``; with
    ``second`` = (tuple, column), a second bad coordinate there too (a later flat position)."""
    vals = [1] * (n * k)
    at = n * 2 // 3 if at is None else at
    vals[at * k + j] = bad
    if second is not None:
        vals[second[0] * k + second[1]] = bad
    return make_index_tensor(vals, dtype, k, device)


def _overflow_cases():
    for dtype, bads in BAD_VALUES.items():
        for bad in bads:
            for shape, k, j in CASE_COLUMNS:
                for path in PATHS:
                    yield pytest.param(dtype, bad, shape, k, j, path,
                                       id=f"{_id(dtype)}-{bad}-{_id(shape)}-k{k}-c{j}-{path}")


def _triton_overflow(dtype, bad, shape, k, j, path):
    """Under Triton: the small path, a 2-d input, the first and last bad value of each type."""
    return path == "small" and shape == (5, 4) and bad in (BAD_VALUES[dtype][0],
                                                          BAD_VALUES[dtype][-1])


@over_backends("dtype,bad,shape,k,j,path", list(_overflow_cases()), triton=_triton_overflow,
               native=small_path)
def test_gather_nd_overflowing_coordinate_raises(dtype, bad, shape, k, j, path, dev,
                                                 monkeypatch):
    n = tuples_for(path, monkeypatch)
    x = torch.arange(float(torch.tensor(shape).prod())).reshape(shape).to(dev)
    i = tuples_with_bad(n, shape, k, j, bad, dtype, device=dev)
    msg = expected_message("gather_nd", i, shape[:k])
    with pytest.raises(IndexError) as e:
        tdo.gather_nd(x, i)
    assert str(e.value) == msg
    out = torch.full(i.shape[:-1] + shape[k:], 7.0, device=dev)
    with pytest.raises(IndexError) as e:
        tdo.gather_nd(x, i, out=out)
    assert str(e.value) == msg
    assert bool((out == 7).all()), "a failing gather wrote into out="
    # the backward op range-checks too (it is called with indices the forward accepted, but it
    # is a public registered op)
    with pytest.raises(IndexError) as e:
        torch.ops.torch_dml_ops.gather_nd_backward(torch.ones(out.shape, device=dev), i,
                                                   list(shape[:k]), 0, None, None)
    # ... and names itself and the argument the size came from
    assert str(e.value) == re.sub(r"InputTensor dimension (\d+)", r"index_sizes[\1]",
                                  msg.replace("gather_nd:", "gather_nd_backward:", 1))


@over_backends("dtype,bad,shape,k,j,path", list(_overflow_cases()), triton=_triton_overflow,
               native=small_path)
def test_scatter_nd_overflowing_coordinate_raises(dtype, bad, shape, k, j, path, dev,
                                                  monkeypatch):
    n = tuples_for(path, monkeypatch)
    x = torch.arange(float(torch.tensor(shape).prod())).reshape(shape).to(dev)
    i = tuples_with_bad(n, shape, k, j, bad, dtype, device=dev)
    upd = torch.full(i.shape[:-1] + shape[k:], -1.0, device=dev)
    msg = expected_message("scatter_nd", i, shape[:k])
    for reduction in ("none", "add", "max"):
        with pytest.raises(IndexError) as e:
            tdo.scatter_nd(x, i, upd, reduction)
        assert str(e.value) == msg
    before = x.clone()
    with pytest.raises(IndexError) as e:
        tdo.scatter_nd_(x, i, upd)
    assert str(e.value) == msg.replace("scatter_nd:", "scatter_nd_:", 1)
    assert torch.equal(x, before), "a failing scatter_nd_ modified its input"
    out = torch.full(shape, 5.0, device=dev)
    with pytest.raises(IndexError) as e:
        tdo.scatter_nd(x, i, upd, "add", out=out)
    assert str(e.value) == msg
    assert bool((out == 5).all()), "a failing scatter wrote into out="


@over_backends("dtype,path", [(d, p) for d in BAD_VALUES for p in PATHS],
               triton=small_path, native=small_path)
def test_smallest_bad_position_is_reported(dtype, path, dev, monkeypatch):
    """Two bad coordinates: the message names the one at the smaller flat position, whichever
    column it is in."""
    n = tuples_for(path, monkeypatch)
    shape, k = (5, 4, 3), 3
    x = torch.arange(60.).reshape(shape).to(dev)
    bad = BAD_VALUES[dtype][0]
    for at, second in [((n // 2, 2), (n - 1, 0)), ((n // 2, 0), (n // 2 + 1, 1)),
                       ((n // 3, 1), (n // 2, 0))]:
        i = tuples_with_bad(n, shape, k, at[1], bad, dtype, at=at[0], second=second, device=dev)
        msg = expected_message("gather_nd", i, shape)
        assert f"position ({at[0]}, {at[1]})" in msg
        with pytest.raises(IndexError) as e:
            tdo.gather_nd(x, i)
        assert str(e.value) == msg
        with pytest.raises(IndexError) as e:
            tdo.scatter_nd(x, i, torch.zeros(n, device=dev))
        assert str(e.value) == msg.replace("gather_nd", "scatter_nd")


@over_backends("dtype,bad", [(torch.int32, 2**30), (torch.int64, 2**62), (torch.int64, -2**62)])
def test_gather_nd_brief_example_3000_tuples(dtype, bad, dev):
    """The reported case, at the default thresholds: 3000 tuples [0, 1] and one [bad, 1] used
    to return x[0, 1] (the linearized row wrapped into range)."""
    x = torch.arange(20.).reshape(5, 4).to(dev)
    i = torch.tensor([[0, 1]] * 3000, dtype=dtype)
    i[1234, 0] = bad
    with pytest.raises(IndexError, match=rf"^gather_nd: IndicesTensor value {bad} at position "
                                         rf"\(1234, 0\) is out of range for InputTensor "
                                         rf"dimension 0 of size 5; valid range \[-5, 4\]$"):
        tdo.gather_nd(x, i.to(dev))


@over_backends("dtype,path", [(d, p) for d in (torch.int32, torch.int64) for p in PATHS],
               triton=small_path, native=small_path)
def test_gather_nd_column0_below_the_other_sizes(dtype, path, dev, monkeypatch):
    """Dimension 0 smaller than the others: a column-0 index in [size0, size1) passes the flat
    min/max and is caught by the gather kernel (the linear row is past the end)."""
    n = tuples_for(path, monkeypatch)
    x = torch.arange(24.).reshape(3, 8).to(dev)
    vals = [2, 7] * n
    vals[2 * (n // 2)] = 5
    i = torch.tensor(vals, dtype=dtype).reshape(n, 2).to(dev)
    with pytest.raises(IndexError) as e:
        tdo.gather_nd(x, i)
    assert str(e.value) == expected_message("gather_nd", i, (3, 8))
    x3 = torch.arange(3 * 8 * 8.).reshape(3, 8, 8).to(dev)
    with pytest.raises(IndexError) as e:
        tdo.gather_nd(x3, i)
    assert str(e.value) == expected_message("gather_nd", i, (3, 8))


@over_backends("dtype", [torch.int32, torch.int64])
def test_gather_nd_large_batched_overflow_raises(dtype, dev):
    """Batch dims take the fully checked linearization (a per-batch base is added)."""
    x = torch.arange(2 * 5 * 4.).reshape(2, 5, 4).to(dev)
    bad = 2**30 if dtype == torch.int32 else 2**62
    vals = [1] * (2 * 1500 * 2)
    vals[(1500 + 7) * 2] = bad
    i = torch.tensor(vals, dtype=torch.int64).to(dtype).reshape(2, 1500, 2).to(dev)
    with pytest.raises(IndexError, match=rf"value {bad} at position \(1, 7, 0\) .* dimension 1 "):
        tdo.gather_nd(x, i, 1)


@over_backends("dtype,path", [(d, p) for d in BAD_VALUES for p in PATHS],
               triton=small_path, native=small_path)
def test_gather_nd_valid_extremes_still_gather(dtype, path, dev, monkeypatch):
    """The range check accepts every valid index: the largest and, for signed types, the most
    negative one of every dimension."""
    n, shape = tuples_for(path, monkeypatch), (5, 4, 3)
    x = torch.randn(shape)
    signed = dtype in (torch.int32, torch.int64)
    vals = []
    for t in range(n):
        vals += [(4, 3, 2), (-5, -4, -3) if signed else (0, 0, 0), (t % 5, t % 4, t % 3)][t % 3]
    i = make_index_tensor(vals, dtype, 3)
    got = tdo.gather_nd(x.to(dev), i.to(dev)).cpu()
    cols = [torch.tensor(c) for c in zip(*[vals[p:p + 3] for p in range(0, len(vals), 3)])]
    assert torch.equal(got, x[cols[0], cols[1], cols[2]])
    got2 = tdo.gather_nd(x.to(dev), i[:, :2].to(dev)).cpu()
    assert torch.equal(got2, x[cols[0], cols[1]])


EMPTY_SLICE_CASES = [
    # (input shape, batch_dims, indices values, index dtype, k, bad?)
    ((4, 0), 0, [7], torch.int64, 1, True),
    ((4, 0), 0, [-5], torch.int64, 1, True),
    ((4, 0), 0, [-4], torch.int32, 1, False),
    ((4, 0), 0, [2**63], torch.uint64, 1, True),
    ((4, 0), 0, [4], torch.uint32, 1, True),
    ((4, 3, 0, 2), 0, [1, 3], torch.int64, 2, True),
    ((4, 3, 0, 2), 0, [3, -3], torch.int32, 2, False),
    ((2, 4, 0), 1, [4], torch.int64, 1, True),
    ((2, 4, 0), 1, [-4], torch.int32, 1, False),
]


def _empty_slice_call(op, x, i, b):
    dev = x.device
    upd_shape = i.shape[:-1] + x.shape[b + i.shape[-1]:]
    if op == "gather":
        return tdo.gather_nd(x, i, b)
    if op == "gather_out":
        out = torch.empty(upd_shape, device=dev)
        tdo.gather_nd(x, i, b, out=out)
        return out
    if op == "scatter":
        return tdo.scatter_nd(x, i, torch.empty(upd_shape, device=dev))
    if op == "scatter_mul":
        return tdo.scatter_nd(x, i, torch.empty(upd_shape, device=dev), "mul")
    if op == "scatter_out":
        out = torch.empty(x.shape, device=dev)
        tdo.scatter_nd(x, i, torch.empty(upd_shape, device=dev), out=out)
        return out
    return tdo.scatter_nd_(x, i, torch.empty(upd_shape, device=dev))


_EMPTY_SLICE_PARAMS = [
    (op,) + case + (path,)
    for op in ("gather", "gather_out", "scatter", "scatter_mul", "scatter_out", "scatter_")
    for case in EMPTY_SLICE_CASES
    if op.startswith("gather") or case[1] == 0          # scatter has no batch dims
    for path in PATHS
]


@over_backends("op,shape,b,vals,dtype,k,bad,path", _EMPTY_SLICE_PARAMS,
               triton=small_path, native=small_path)
def test_empty_slice_indices_are_checked(op, shape, b, vals, dtype, k, bad, path, dev,
                                         monkeypatch):
    n = tuples_for(path, monkeypatch)
    x = torch.zeros(shape, device=dev)
    lead = shape[:b]
    batches = shape[0] if b else 1
    # the tuple under test last (of the last batch): the large paths see it late
    flat = [0] * (k * (n * batches - 1)) + vals
    i = make_index_tensor(flat, dtype, k, dev).reshape(lead + (n, k))
    if not bad:
        res = _empty_slice_call(op, x, i, b)
        want = i.shape[:-1] + shape[b + k:] if op.startswith("gather") else shape
        assert tuple(res.shape) == tuple(want) and res.numel() == 0
        return
    if b:     # flat positions run over the batch dims of the indices too
        msg = expected_message("gather_nd", i.reshape(-1, k), shape[b:b + k], b)
        pos = first_bad(i.reshape(-1, k), shape[b:b + k])
        where = tuple(int(c) for c in torch.unravel_index(torch.tensor(pos), i.shape))
        msg = msg.replace(f"position ({pos // k}, {pos % k})", f"position {where}")
    else:
        msg = expected_message("gather_nd" if op.startswith("gather") else "scatter_nd", i,
                               shape[:k])
    if op == "scatter_":
        msg = msg.replace("scatter_nd:", "scatter_nd_:", 1)
    with pytest.raises(IndexError) as e:
        _empty_slice_call(op, x, i, b)
    assert str(e.value) == msg


@over_backends("dtype,bad,col", [(torch.int32, 2**30, 0), (torch.int32, -2**31, 0),
                                 (torch.int64, 2**62, 0), (torch.int64, -2**62, 0),
                                 (torch.int64, 2**63 - 1, 1), (torch.uint32, 2**32 - 1, 0),
                                 (torch.uint64, 2**63, 0), (torch.uint64, 2**62, 1)],
               only=OTHERS)
def test_overflowing_coordinate_same_error(both, dev, dtype, bad, col):
    """3000 tuples (the default thresholds of every backend): the first of two bad
    coordinates, one message on every backend (Triton: found by its kernels)."""
    x = torch.arange(20., device=dev).reshape(5, 4)
    vals = [0, 1] * 3000
    vals[2 * 1777 + col] = bad
    vals[2 * 2500] = 5                     # a later bad coordinate: the first one is named
    i = idx(vals, dtype, (3000, 2), dev)
    both(lambda: tdo.gather_nd(x, i), kernel=True)
    both(lambda: tdo.scatter_nd(x, i, torch.zeros(3000, device=dev)), kernel=True)
    both(lambda: tdo.scatter_nd(x, i, torch.zeros(3000, device=dev), "add"))


def _bad_gather_cases():
    for dt in INDEX_DTYPES:
        signed = dt in (torch.int64, torch.int32)
        for col, val in [(0, 6), (1, 5), (0, -7), (1, -6), (0, 2**63 + 3)]:
            if (val < 0 and not signed) or (val >= 2**31 and dt != torch.uint64):
                continue
            for where in (0, 4, 39):
                yield pytest.param(dt, col, val, where, id=f"{_id(dt)}-c{col}-{val}-t{where}")


@over_backends("index_dtype,bad_col,bad_value,where", list(_bad_gather_cases()), only=OTHERS,
               triton=lambda dt, col, val, where: where == 4)
def test_gather_out_of_range_same_error_out_untouched(errors, num_threads, dev, index_dtype,
                                                      bad_col, bad_value, where):
    num_threads(2)
    x = make_data((6, 5, 3), torch.float32).to(dev)
    signed = index_dtype in (torch.int64, torch.int32)
    i = make_indices((40,), (6, 5), torch.int64, negative=signed).tolist()
    i[where][bad_col] = bad_value
    if where + 3 < 40:
        i[where + 3][0] = 100     # a later bad tuple must not be the one reported
    i = idx([v % U64 if index_dtype == torch.uint64 else v for row in i for v in row],
            index_dtype, (40, 2), dev)
    msg = errors(lambda: tdo.gather_nd(x, i))
    assert f"value {bad_value} at position ({where}, {bad_col})" in msg
    for out in (torch.full((40, 3), 7.0, device=dev),
                strided_like(torch.full((40, 3), 7.0, device=dev))):
        errors(lambda: tdo.gather_nd(x, i, out=out))
        assert torch.equal(out, torch.full((40, 3), 7.0, device=dev))


@over_backends("", [()], only=OTHERS)
def test_gather_empty_dimension_and_batch_error(errors, dev):
    x = torch.zeros(3, 0, 2, device=dev)
    i = torch.zeros(4, 2, dtype=torch.int64, device=dev)
    assert "dimension 1 of size 0" in errors(lambda: tdo.gather_nd(x, i))
    xb = torch.randn(2, 5, 3, device=dev)
    ib = make_indices((2, 4), (5,), torch.int64).reshape(2, 4, 1)
    ib[1, 2, 0] = -6
    ib = ib.to(dev)
    assert "position (1, 2, 0)" in errors(lambda: tdo.gather_nd(xb, ib, 1))


def _bad_scatter_cases():
    for dt in INDEX_DTYPES:
        signed = dt in (torch.int64, torch.int32)
        for col, val in [(0, 6), (1, -6), (0, 2**63 + 1)]:
            if (val < 0 and not signed) or (val >= 2**31 and dt != torch.uint64):
                continue
            for where in (0, 29):
                for reduction in ("none", "add"):
                    yield pytest.param(dt, col, val, where, reduction,
                                       id=f"{_id(dt)}-c{col}-{val}-t{where}-{reduction}")


@over_backends("index_dtype,bad_col,bad_value,where,reduction", list(_bad_scatter_cases()),
               only=OTHERS)
def test_scatter_out_of_range_same_error_untouched(errors, num_threads, dev, index_dtype,
                                                   bad_col, bad_value, where, reduction):
    num_threads(2)
    x = make_data((6, 5, 3), torch.float32).to(dev)
    signed = index_dtype in (torch.int64, torch.int32)
    i = make_indices((30,), (6, 5), torch.int64, negative=signed).tolist()
    i[where][bad_col] = bad_value
    i = idx([v % U64 if index_dtype == torch.uint64 else v for row in i for v in row],
            index_dtype, (30, 2), dev)
    u = make_data((30, 3), torch.float32).to(dev)
    msg = errors(lambda: tdo.scatter_nd(x, i, u, reduction))
    assert f"value {bad_value} at position ({where}, {bad_col})" in msg
    x0 = x.clone()
    out = torch.full_like(x, 9.0)
    errors(lambda: tdo.scatter_nd(x, i, u, reduction, out=out))
    assert torch.equal(out, torch.full_like(x, 9.0)) and torch.equal(x, x0)
    errors(lambda: tdo.scatter_nd_(x, i, u, reduction))
    assert torch.equal(x, x0)


# ---------------------------------------------------------------------------------------------
# check_indices=False: the same on every backend (an out-of-range tuple gives a zero slice in a
# gather and is skipped by a scatter), and never a read or write out of bounds.  Every tensor
# lies inside a guarded buffer: a wrapped, clamped or unchecked coordinate would read the guard
# value or write over it.
# ---------------------------------------------------------------------------------------------

GUARD = 777
#: Values out of range for a dimension of size 4 or 3 (and some that would alias an in-range
#: row if they wrapped or were taken modulo the size), per index dtype.
UNCHECKED_BAD = {
    torch.int64: [4, -5, 7, 2**40, -2**63, 2**63 - 1],
    torch.int32: [4, -5, 7, 2**31 - 1, -2**31],
    torch.uint32: [4, 7, 2**32 - 1, 2**31],
    torch.uint64: [4, 7, 2**63, 2**64 - 1],
}


def guarded(shape, dtype, dev, values=None, pad=8):
    """(buffer, view): a tensor of ``shape`` inside a buffer holding GUARD before and after it."""
    n = int(np.prod(shape))
    buf = torch.full((pad + n + pad,), GUARD, dtype=dtype, device=dev)
    view = buf[pad:pad + n].view(shape)
    if values is not None:
        view.copy_(values)
    return buf, view


def assert_guard_intact(buf, what, pad=8):
    g = buf.cpu()
    assert bool((g[:pad] == GUARD).all()) and bool((g[-pad:] == GUARD).all()), \
        f"{what}: the guard around the tensor was written"


def unchecked_tuples(index_dtype, sizes, n_good, seed=0):
    """Index values ``[n, len(sizes)]``: in-range tuples interleaved with tuples that have one
    bad coordinate (each bad value of the dtype, in each column)."""
    g = torch.Generator().manual_seed(seed)
    signed = index_dtype in (torch.int64, torch.int32)
    good = make_indices((n_good,), sizes, torch.int64, negative=signed, generator=g).tolist()
    rows = []
    for v in UNCHECKED_BAD[index_dtype]:
        for col in range(len(sizes)):
            row = list(good[len(rows) % n_good])
            row[col] = v
            rows.append(row)
    out = []
    for r, bad in enumerate(rows):
        out.append(good[r % n_good])
        out.append(bad)
    out.extend(good[len(rows):])
    return out


@pytest.mark.parametrize("layout", ["plain", "out", "strided_out", "batch", "dml", "transposed"])
@over_backends("index_dtype", INDEX_DTYPES)
def test_unchecked_gather_zeros_out_of_range_tuples(any_backend, dev, index_dtype, layout):
    """check_indices=False: no IndexError; a tuple with a coordinate out of range gives a zero
    slice, the others their slice, on every backend (the oracle's skip_bad); nothing outside
    the tensors is read or written."""
    cpp_covers(any_backend, "gather_nd", "gather_nd_out")
    b = 1 if layout == "batch" else 0
    shape = (4, 3, 5)
    buf, x = guarded(shape, torch.float32, dev, torch.arange(1, 61, dtype=torch.float32)
                     .reshape(shape))
    if layout == "transposed":          # the slice read through a stride of 3
        buf, xt = guarded((4, 5, 3), torch.float32, dev,
                          torch.arange(1, 61, dtype=torch.float32).reshape(4, 3, 5).transpose(1, 2))
        x = xt.transpose(1, 2)
    if b:
        vals = ([v for r in unchecked_tuples(index_dtype, (3,), 2) for v in r] * 2)[:16]
        i = idx(vals, index_dtype, (4, 4, 1), dev)
    else:
        vals = unchecked_tuples(index_dtype, (4, 3), 5)
        i = idx([v for r in vals for v in r], index_dtype, (len(vals), 2), dev)
    expected = gather_nd_ref(x.cpu(), i.cpu(), b, skip_bad=True)
    res_shape = expected.shape
    if layout in ("out", "strided_out"):
        n = int(np.prod(res_shape))
        obuf, out = guarded((n * (2 if layout == "strided_out" else 1),), torch.float32, dev)
        out = out[::2] if layout == "strided_out" else out
        out = out.view(res_shape) if layout == "out" else out.as_strided(
            res_shape, (res_shape[1] * 2, 2))
        res = tdo.gather_nd(x, i, b, check_indices=False, out=out)
        assert res is out
        assert_guard_intact(obuf, "out=")
    elif layout == "dml":
        res = tdo.gather_nd(x.unsqueeze(0), i[None, None], input_dimension_count=3,
                            indices_dimension_count=2, check_indices=False)
        res = res.reshape(res_shape)
    else:
        res = tdo.gather_nd(x, i, b, check_indices=False)
    bits_equal_ref(res, expected)
    assert not bool((res == GUARD).any()), "a bad tuple read the guard"
    assert_guard_intact(buf, "input")
    with pytest.raises(IndexError):          # the default still raises
        tdo.gather_nd(x, i, b)


@pytest.mark.parametrize("variant", ["functional", "out", "inplace", "dml_inplace"])
@over_backends("index_dtype,dtype,reduction",
               [(d, torch.int32, r) for d in INDEX_DTYPES for r in REDUCTIONS]
               + [(torch.int64, torch.float32, r) for r in ("none", "add", "mul", "max")]
               + [(torch.uint64, torch.float16, r) for r in ("add", "mul")])
def test_unchecked_scatter_skips_out_of_range_tuples(any_backend, dev, index_dtype, dtype,
                                                     reduction, variant, deterministic):
    """check_indices=False: no IndexError; a tuple with a coordinate out of range is skipped,
    the others apply in index order (duplicates included), on every backend, the Triton
    kernels' fallbacks to the portable path included (mul; float16 add); nothing outside the
    target is written, nothing outside the updates read."""
    cpp_covers(any_backend, "scatter_nd", "scatter_nd_out", "scatter_nd_")
    g = torch.Generator().manual_seed(3)
    shape = (4, 3, 5)
    x0 = make_data(shape, dtype, g)
    if dtype == torch.int32:
        x0 = x0 % 1000        # products of a few updates stay exact in the oracle
    vals = unchecked_tuples(index_dtype, (4, 3), 5)
    n = len(vals)
    i = idx([v for r in vals for v in r], index_dtype, (n, 2), dev)
    ubuf, u = guarded((n, 5), dtype, dev, (make_data((n, 5), dtype, g) % 7 + 1)
                      if dtype == torch.int32 else make_data((n, 5), dtype, g) / 64)
    # the call without the bad tuples, checked (float16: the portable path's rounding, which
    # the oracle's per-step rounding does not follow); the oracle for the other dtypes
    kept = [r for r, row in enumerate(vals) if all(
        (-s if index_dtype in (torch.int64, torch.int32) else 0) <= v < s
        for v, s in zip(row, shape))]
    # (select on the CPU: CUDA's indexing has no uint32/uint64 kernel)
    expected = tdo.scatter_nd(x0.to(dev), i.cpu()[kept].to(dev), u.cpu()[kept].to(dev),
                              reduction).cpu()
    if dtype != torch.float16:
        bits_equal(expected, scatter_nd_ref(x0, i.cpu(), u.cpu(), reduction, skip_bad=True),
                   "the checked call without the bad tuples vs the oracle")
    buf, x = guarded(shape, dtype, dev, x0)
    if variant == "functional":
        res = tdo.scatter_nd(x, i, u, reduction, check_indices=False)
        bits_equal(x.cpu(), x0, "the input")
    elif variant == "out":
        obuf, res = guarded(shape, dtype, dev)
        tdo.scatter_nd(x, i, u, reduction, check_indices=False, out=res)
        assert_guard_intact(obuf, "out=")
    elif variant == "inplace":
        res = tdo.scatter_nd_(x, i, u, reduction, check_indices=False)
        assert res is x
    else:
        tdo.scatter_nd_(x.unsqueeze(0), i[None, None], u[None, None], reduction,
                        input_dimension_count=3, indices_dimension_count=2, check_indices=False)
        res = x
    bits_equal(res.cpu(), expected, f"{reduction} {variant}")
    assert_guard_intact(buf, "the input / in-place target")
    assert_guard_intact(ubuf, "the updates")


@over_backends("", [()])
def test_unchecked_zero_size_and_empty_dimension(any_backend, dev):
    """check_indices=False on an empty indexed dimension (every tuple out of range): zeros from
    a gather, an unchanged copy from a scatter; empty slices: nothing to read or write."""
    cpp_covers(any_backend, "gather_nd", "scatter_nd")
    x = torch.empty_strided((0, 3, 2), (1, 1, 3), device=dev)
    i = torch.tensor([[0], [5], [-1]], device=dev)
    assert torch.equal(tdo.gather_nd(x, i, check_indices=False).cpu(), torch.zeros(3, 3, 2))
    out = torch.full((3, 3, 2), 7.0, device=dev)
    tdo.gather_nd(x, i, check_indices=False, out=out)
    assert torch.equal(out.cpu(), torch.zeros(3, 3, 2))
    assert tdo.scatter_nd(x, i, torch.ones(3, 3, 2, device=dev), check_indices=False).shape == \
        (0, 3, 2)
    y = torch.arange(6.0, device=dev).reshape(3, 2, 1)[:, :, :0]      # empty slices
    assert tdo.gather_nd(y, i, check_indices=False).shape == (3, 2, 0)
    yz = torch.arange(6.0, device=dev).reshape(3, 2)
    iz = torch.tensor([[1, 5], [7, 0], [-1, -1]], device=dev)
    assert torch.equal(tdo.gather_nd(yz, iz, check_indices=False).cpu(),
                       torch.tensor([0.0, 0.0, 5.0]))
    assert torch.equal(tdo.scatter_nd(yz, iz, torch.full((3,), 9.0, device=dev), "add",
                                      check_indices=False).cpu(),
                       torch.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 14.0]]))


@pytest.mark.parametrize("reduction", ["gather"] + REDUCTIONS)
@over_backends("", [()])
def test_unchecked_gradients_skip_out_of_range_tuples(any_backend, dev, reduction):
    """The gradient of a check_indices=False call: the skipped (or zero-gathered) tuples get a
    zero gradient and give none, on every backend (the backward ops, which always check, never
    see them); gradcheck on the rest."""
    i = torch.tensor([[1], [5], [-1], [-7], [1]], device=dev)
    x = torch.randn(3, 2, dtype=torch.float64, device=dev, requires_grad=True)
    u = torch.randn(5, 2, dtype=torch.float64, device=dev, requires_grad=True)
    if reduction == "gather":
        fn = lambda x: tdo.gather_nd(x, i, check_indices=False)     # noqa: E731
        torch.autograd.gradcheck(fn, (x,))
        torch.autograd.gradgradcheck(fn, (x,))
        fn(x).sum().backward()
        assert torch.equal(x.grad.cpu(), torch.tensor([[0.0, 0.0], [2.0, 2.0], [1.0, 1.0]],
                                                      dtype=torch.float64))
        return
    iu = torch.tensor([[1], [5], [-1], [-7], [0]], device=dev)      # no duplicates: smooth
    fn = lambda x, u: tdo.scatter_nd(x, iu, u, reduction, check_indices=False)  # noqa: E731
    torch.autograd.gradcheck(fn, (x, u))
    fn(x, u).sum().backward()
    assert torch.equal(u.grad[1].cpu(), torch.zeros(2, dtype=torch.float64))
    assert torch.equal(u.grad[3].cpu(), torch.zeros(2, dtype=torch.float64))
    assert bool(torch.isfinite(x.grad).all()) and bool(torch.isfinite(u.grad).all())


# =============================================================================================
# 2. Zero-size tensors
# =============================================================================================

# (input shape, index values, index shape, batch_dims)
GATHER_ZERO = {
    "brief_empty_slices": ((3, 0, 0, 4), [-2], (1,), 0),
    "empty_slice": ((3, 0), [2, 0], (2, 1), 0),
    "empty_slice_bad": ((3, 0), [0, 3], (2, 1), 0),
    "empty_slice_bad_negative": ((3, 0), [0, -4], (2, 1), 0),
    "empty_slice_k2": ((3, 2, 0), [2, 1, 0, 0], (2, 2), 0),
    "empty_slice_k2_bad": ((3, 2, 0), [2, 1, 0, 2], (2, 2), 0),
    "empty_indexed_dim": ((3, 0, 0, 4), [1, 0], (1, 2), 0),
    "empty_first_dim": ((0, 4), [0], (1, 1), 0),
    "empty_input_no_tuples": ((0, 4), [], (0, 1), 0),
    "no_tuples": ((3, 4), [], (0, 2), 0),
    "no_tuples_2d": ((3, 4), [], (2, 0, 1), 0),
    "empty_batch": ((0, 3, 2), [], (0, 5, 1), 1),
    "batch_empty_slice": ((2, 3, 0), [1, 2], (2, 1, 1), 1),
    "batch_empty_slice_bad": ((2, 3, 0), [1, 3], (2, 1, 1), 1),
    "batch_no_tuples": ((2, 3, 4), [], (2, 0, 1), 1),
    "k0_refused": ((3, 4), [], (2, 0), 0),           # a ConstraintError on every backend
    "k0_no_tuples_refused": ((3, 4), [], (0, 0), 0),
}


def _with_index_dtypes(cases):
    """(case, index dtype) pairs; negative indices only with the signed types."""
    return [pytest.param(c, d, id=f"{c}-{_id(d)}") for c, v in cases.items() for d in INDEX_DTYPES
            if d in (torch.int64, torch.int32) or min(v[1], default=0) >= 0]


@over_backends("case,index_dtype", _with_index_dtypes(GATHER_ZERO), only=OTHERS)
def test_gather_nd_zero_size(both, dev, case, index_dtype):
    shape, vals, ishape, b = GATHER_ZERO[case]
    x = torch.zeros(shape, device=dev)
    i = idx(vals, index_dtype, ishape, dev)
    both(lambda: tdo.gather_nd(x, i, b))
    out_shape = tuple(ishape[:-1]) + tuple(shape[b + ishape[-1]:])

    def into_out():
        out = torch.full(out_shape, 3.0, device=dev)
        before = out.clone()
        try:
            tdo.gather_nd(x, i, b, out=out)
        except IndexError:
            assert torch.equal(out, before), "a failing gather wrote into out="
            raise
        return out
    both(into_out)


@over_backends("", [()], only=OTHERS)
def test_gather_nd_zero_size_transposed_input(both, dev):
    x = torch.zeros(4, 0, device=dev).t()          # (0, 4), strides (1, 0)
    both(lambda: tdo.gather_nd(x, torch.tensor([[0]], device=dev)))
    both(lambda: tdo.gather_nd(x, torch.zeros(0, 1, dtype=torch.int64, device=dev)))
    y = torch.zeros(0, 3, device=dev).t()          # (3, 0): empty slices
    both(lambda: tdo.gather_nd(y, torch.tensor([[2], [-3]], device=dev)))
    both(lambda: tdo.gather_nd(y, torch.tensor([[3]], device=dev)))


# (input shape, index values, index shape)
SCATTER_ZERO = {
    "brief_empty_slice_bad": ((4, 0), [7], (1, 1)),
    "empty_slice": ((4, 0), [3, -4], (2, 1)),
    "empty_slice_k2_bad": ((3, 2, 0), [1, 2], (1, 2)),
    "empty_indexed_dim": ((3, 0, 2), [1, 0], (1, 2)),
    "empty_first_dim": ((0, 3), [0], (1, 1)),
    "empty_input_no_tuples": ((0, 3), [], (0, 1)),
    "no_tuples": ((3, 4), [], (0, 2)),
    "no_tuples_2d": ((3, 4), [], (2, 0, 1)),
    "k0_whole_input": ((3, 4), [], (2, 0)),        # ONNX ScatterND's k = 0
    "k0_no_tuples": ((3, 4), [], (0, 0)),
    "k0_empty_input": ((3, 0), [], (2, 0)),
}


@pytest.mark.parametrize("variant", ["functional", "out", "inplace"])
@pytest.mark.parametrize("reduction", ["none", "add", "max", "mul"])
@over_backends("case,index_dtype", _with_index_dtypes(SCATTER_ZERO), only=OTHERS)
def test_scatter_nd_zero_size(both, dev, case, index_dtype, reduction, variant):
    shape, vals, ishape = SCATTER_ZERO[case]
    dtype = torch.int32                    # max has a Triton kernel for int32; mul does not
    x = torch.arange(int(torch.tensor(shape).prod()), dtype=dtype).reshape(shape).to(dev)
    i = idx(vals, index_dtype, ishape, dev)
    u = torch.ones(tuple(ishape[:-1]) + tuple(shape[ishape[-1]:]), dtype=dtype, device=dev)

    def call():
        if variant == "functional":
            return tdo.scatter_nd(x, i, u, reduction)
        target = x.clone() if variant == "inplace" else torch.full(shape, 9, dtype=dtype,
                                                                      device=dev)
        before = target.clone()
        try:
            if variant == "inplace":
                tdo.scatter_nd_(target, i, u, reduction)
            else:
                tdo.scatter_nd(x, i, u, reduction, out=target)
        except IndexError:
            assert torch.equal(target, before), "a failing call modified its target"
            raise
        return target
    both(call)
    assert torch.equal(x, torch.arange(x.numel(), dtype=dtype).reshape(shape).to(dev))


# (input shape, index values, index shape, batch_dims, the input's strides): empty inputs whose strides
# chain nowhere (an empty tensor is "contiguous" whatever its strides, so .contiguous() keeps
# them), with tuples into the empty dimension (bad) or beside it.
ZERO_ODD_STRIDES = {
    "empty_indexed_bad": ((0, 3, 2, 3), [1, 4], (2, 1), 0, (1, 1, 3, 6)),
    "empty_indexed_bad_negative": ((0, 3, 2, 3), [-1], (1, 1), 0, (1, 1, 3, 6)),
    "empty_second_indexed_bad": ((3, 0, 2, 3), [1, 0], (1, 2), 0, (1, 1, 1, 2)),
    "empty_slice_bad": ((2, 0, 2, 3), [5], (1, 1), 0, (1, 1, 1, 2)),
    "empty_slice_good": ((2, 0, 2, 3), [1, -2], (2, 1), 0, (1, 1, 1, 2)),
    "batch_empty_indexed_bad": ((2, 0, 2, 3), [0, 0], (2, 1, 1), 1, (1, 1, 1, 2)),
}


ODD_VARIANTS = ("gather", "gather_out", "scatter", "scatter_out", "scatter_inplace")


@over_backends("case,index_dtype,variant", [
    pytest.param(*p.values, v, id=f"{p.id}-{v}") for p in _with_index_dtypes(ZERO_ODD_STRIDES)
    for v in ODD_VARIANTS if v.startswith("gather") or not ZERO_ODD_STRIDES[p.values[0]][3]],
    only=OTHERS)
def test_zero_size_odd_strides_bad_tuple(both, dev, case, index_dtype, variant):
    """An empty input with a bad tuple is the IndexError of every backend, whatever the empty
    input's strides (Triton once launched with a stride of None: an InterpreterError)."""
    shape, vals, ishape, b, strides = ZERO_ODD_STRIDES[case]
    x = torch.empty_strided(shape, strides, device=dev)
    i = idx(vals, index_dtype, ishape, dev)
    k = ishape[-1]
    res_shape = tuple(ishape[:-1]) + tuple(shape[b + k:])

    def call():
        if variant == "gather":
            return tdo.gather_nd(x, i, b)
        if variant == "gather_out":
            return tdo.gather_nd(x, i, b, out=torch.empty(res_shape, device=dev))
        u = torch.ones(res_shape, device=dev)
        if variant == "scatter":
            return tdo.scatter_nd(x, i, u)
        if variant == "scatter_out":
            return tdo.scatter_nd(x, i, u, out=torch.empty_strided(shape, strides, device=dev))
        return tdo.scatter_nd_(torch.empty_strided(shape, strides, device=dev), i, u)
    kind, got = both(call)
    assert kind == ("ok" if case.endswith("good") else "raise"), got
    if kind == "raise":
        assert isinstance(got, IndexError), got


@pytest.mark.parametrize("direction", DIRS)
@over_backends("shape,k,axis", [((0, 5), 2, -1), ((3, 0, 4), 1, 2), ((3, 0, 4), 4, 2),
                                ((2, 3, 0), 2, 1), ((0, 5), 1, 0), ((3, 0), 1, 1),
                                ((0,), 1, 0)], only=OTHERS)
def test_top_k1_zero_size(both, dev, shape, k, axis, direction):
    for dtype in (torch.float32, torch.int8, torch.uint64):
        x = torch.zeros(shape, dtype=dtype, device=dev)
        for index_dtype in (torch.int64, torch.uint32):
            both(lambda: tuple(tdo.top_k1(x, k, axis, direction, index_dtype)))


# =============================================================================================
# 3. gather_nd and scatter_nd
# =============================================================================================

@over_backends("dtype,index_dtype", [(d, i) for d in DATA_DTYPES for i in INDEX_DTYPES])
def test_gather_every_dtype(any_backend, dev, dtype, index_dtype):
    cpp_covers(any_backend, "gather_nd")
    x = make_data((5, 6, 7), dtype)
    for k in (1, 2, 3):
        i = make_indices((4, 3), x.shape[:k], index_dtype, negative=True)
        bits_equal_ref(tdo.gather_nd(x.to(dev), i.to(dev)), gather_nd_ref(x, i))


@over_backends("rank,slice_dims", [(r, s) for r in range(1, 9) for s in (0, 1, 2)],
               triton=lambda r, s: s == 1 and r in (2, 3, 5, 8))
def test_gather_ranks_and_slices(any_backend, dev, rank, slice_dims):
    """Ranks 1-8, every k, slices of 1, 2, 4, 8, 16 and other byte lengths."""
    cpp_covers(any_backend, "gather_nd")
    g = torch.Generator().manual_seed(rank)
    shape = tuple(int(s) for s in torch.randint(1, 4, (rank,), generator=g))
    for k in range(1, rank + 1):
        for dtype in (torch.uint8, torch.int16, torch.float32, torch.float64):
            x = make_data(shape, dtype, g)
            if rank - k < slice_dims:
                continue
            i = make_indices((7,), shape[:k], torch.int64, negative=True, generator=g)
            bits_equal_ref(tdo.gather_nd(x.to(dev), i.to(dev)), gather_nd_ref(x, i))


@over_backends("b", [1, 2])
def test_gather_batch_dims(any_backend, dev, b):
    cpp_covers(any_backend, "gather_nd")
    x = make_data((3, 2, 5, 4, 3), torch.float32)
    for k in range(1, 5 - b):
        i = make_indices(x.shape[:b] + (6,), x.shape[b:b + k], torch.int32, negative=True)
        bits_equal_ref(tdo.gather_nd(x.to(dev), i.to(dev), b), gather_nd_ref(x, i, b))


@over_backends("", [()])
def test_gather_dml_form(any_backend, dev):
    cpp_covers(any_backend, "gather_nd")
    x = make_data((1, 1, 4, 5, 6), torch.float16)
    i = make_indices((1, 1, 1, 3), (4, 5), torch.uint32).reshape(1, 1, 1, 3, 2)
    out = tdo.gather_nd(x.to(dev), i.to(dev), input_dimension_count=3, indices_dimension_count=2)
    assert out.shape == (1, 1, 1, 3, 6)
    bits_equal_ref(out.reshape(3, 6), gather_nd_ref(x.reshape(4, 5, 6), i.reshape(3, 2)))


@over_backends("", [()], only=OTHERS)
def test_gather_matches_portable_layouts(both, num_threads, dev):
    """Strided indices and out=, empty tensors, zero-length slices; against the portable path."""
    num_threads(2)
    x = make_data((6, 5, 4), torch.float32).to(dev)
    i = make_indices((9,), (6, 5), torch.int64, negative=True).to(dev)
    cases = [
        lambda: tdo.gather_nd(x, strided_like(i)),
        lambda: tdo.gather_nd(x, i, out=strided_like(torch.zeros(9, 4, device=dev))),
        lambda: tdo.gather_nd(x, i, out=torch.zeros(9, 4, device=dev)),
        lambda: tdo.gather_nd(x.transpose(0, 1).contiguous().transpose(0, 1), i),  # strided input
        lambda: tdo.gather_nd(x, i[:0]),
        lambda: tdo.gather_nd(torch.zeros(6, 5, 0, device=dev), i),
        lambda: tdo.gather_nd(x, i.reshape(3, 3, 2), 0),
    ]
    for fn in cases:
        both(fn)


@over_backends("", [()], only=("native",))
def test_gather_large_rows_streaming_stores(any_backend):
    """Outputs of 16 MB and more are written with non-temporal stores (16-byte aligned rows; on
    CPUs where they pay: not AMD's, gather_nd.cpp streaming_pays), a misaligned out= falls back
    to plain copies: both exact."""
    cpp_covers(any_backend, "gather_nd", "gather_nd_out")
    x = make_data((600, 1024), torch.float32)
    i = make_indices((4200,), (600,), torch.int64, negative=True)
    expected = x[i[:, 0]]
    assert torch.equal(tdo.gather_nd(x, i), expected)
    buf = torch.zeros(4200 * 1024 + 1)
    out = buf[1:].view(4200, 1024)          # contiguous, 4 bytes off 16-byte alignment
    tdo.gather_nd(x, i, out=out)
    assert torch.equal(out, expected) and buf[0] == 0
    xo = make_data((600, 1023), torch.float32)     # rows not a multiple of 16 bytes
    assert torch.equal(tdo.gather_nd(xo, i), xo[i[:, 0]])


def make_updates(x, i, g=None):
    k = i.shape[-1]
    return make_data(tuple(i.shape[:-1]) + tuple(x.shape[k:]), x.dtype, g)


def special_floats(t, nan=True):
    """Sprinkle NaN, +-0.0, +-inf into a float tensor (reductions' edge cases).

    ``nan=False`` for add/mul: when two NaNs of different payloads meet, which one survives
    depends on the instruction torch happens to use (scalar ``a + b`` keeps a's, its vectorized
    fmadd b's), so only NaN-free inputs have one right answer (NaNs made by inf - inf or
    0 * inf all have the default payload and still occur)."""
    if not t.dtype.is_floating_point:
        return t
    t = t.clone()
    flat = t.view(-1)
    specials = torch.tensor([float("nan") if nan else 1.5, 0.0, -0.0, float("inf"),
                             -float("inf")], dtype=t.dtype)
    pos = torch.randperm(flat.numel())[: max(1, flat.numel() // 4)]
    flat[pos] = specials[torch.randint(0, 5, (pos.numel(),))]
    return t


_TRITON_SCATTER_DTYPES = (torch.float32, torch.float16, torch.int32, torch.uint8)


@over_backends("dtype,reduction", [(d, r) for d in DATA_DTYPES for r in REDUCTIONS],
               only=OTHERS, triton=lambda d, r: d in _TRITON_SCATTER_DTYPES)
def test_scatter_every_dtype_reduction(both, deterministic, dev, dtype, reduction):
    """Bit-identical to the portable path and to the oracle, with duplicates and special float
    values (deterministic mode: duplicates in index order on every backend)."""
    g = torch.Generator().manual_seed(1)
    nan = reduction not in ("add", "mul")
    x = special_floats(make_data((6, 5, 3), dtype, g), nan)
    for k in (1, 2, 3):
        i = make_indices((40,), x.shape[:k], torch.int64, negative=True, generator=g)
        u = special_floats(make_updates(x, i, g), nan)
        xd, id_, ud = x.to(dev), i.to(dev), u.to(dev)
        _, got = both(lambda: tdo.scatter_nd(xd, id_, ud, reduction),
                      computed_nan=dtype in (torch.float16, torch.bfloat16) and reduction != "none")
        if dtype.is_floating_point:
            continue   # the oracle's numpy round trip changes NaN payloads (the path above is exact)
        bits_equal(got.cpu(), scatter_nd_ref(x, i, u, reduction))


# index shapes [..., 0] of ONNX ScatterND's k = 0: every tuple addresses the whole input
K0_INDEX_SHAPES = [(3, 0), (2, 2, 0), (1, 0), (0, 0)]


@pytest.mark.parametrize("variant", ["functional", "out", "inplace", "dml"])
@over_backends("dtype,reduction", [(d, r) for d in (torch.float32, torch.int32, torch.int64,
                                                    torch.uint8, torch.bool, torch.float64)
                                   for r in REDUCTIONS],
               triton=lambda d, r: d in (torch.float32, torch.int32, torch.uint8))
def test_scatter_k0_updates_the_whole_input(any_backend, dev, deterministic, dtype, reduction,
                                            variant):
    """Index tuples of size 0 (ONNX ScatterND, TensorFlow, onnxruntime): updates have shape
    indices.shape[:-1] + input.shape and each one covers the whole input, applied in index
    order: "none" keeps the last, the reductions accumulate every one, bit for bit the oracle's
    (deterministic mode: Triton's float add takes the ordered path)."""
    cpp_covers(any_backend, "scatter_nd", "scatter_nd_out", "scatter_nd_")
    g = torch.Generator().manual_seed(5)
    x = make_data((4, 3), dtype, g)
    if not dtype.is_floating_point and dtype != torch.bool:
        x = x % 5        # products of four factors stay in range of the oracle's numpy type
    for ishape in K0_INDEX_SHAPES:
        i = torch.empty(ishape, dtype=torch.int64)
        u = make_data(ishape[:-1] + (4, 3), dtype, g)
        if not dtype.is_floating_point and dtype != torch.bool:
            u = u % 5
        expected = scatter_nd_ref(x, i, u, reduction)
        xd, id_, ud = x.to(dev), i.to(dev), u.to(dev)
        if variant == "functional":
            res = tdo.scatter_nd(xd, id_, ud, reduction)
            bits_equal(xd.cpu(), x, "the input")
        elif variant == "out":
            res = torch.zeros_like(xd)
            assert tdo.scatter_nd(xd, id_, ud, reduction, out=res) is res
        elif variant == "inplace":
            res = xd.clone()
            assert tdo.scatter_nd_(res, id_, ud, reduction) is res
        else:   # DML form: input {1,4,3} (count 2), indices {1,n,0} (count 2), updates {n,4,3}
            n = int(np.prod(ishape[:-1]))
            res = tdo.scatter_nd(xd.unsqueeze(0), id_.reshape(1, n, 0), ud.reshape(n, 4, 3),
                                 reduction, input_dimension_count=2, indices_dimension_count=2)
            res = res.reshape(4, 3)
        bits_equal(res.cpu(), expected, f"{reduction} {variant} {ishape}")


@over_backends("dtype,reduction", [(d, r) for d in (torch.float16, torch.bfloat16)
                                   for r in REDUCTIONS], only=OTHERS,
               triton=lambda d, r: d == torch.float16)
def test_scatter_k0_half_rounding_matches_portable(both, dev, deterministic, dtype, reduction):
    """float16/bfloat16 with k = 0: the portable path's rounding (add and mul summed in
    float32 in index order, rounded once per element), on every backend (deterministic mode: on
    CUDA the duplicates' order is otherwise the atomics')."""
    g = torch.Generator().manual_seed(6)
    for shape, n in (((4, 3), 5), ((64, 65), 4)):        # few and many updated elements
        x = make_data(shape, dtype, g).to(dev)
        i = torch.empty(n, 0, dtype=torch.int32, device=dev)
        u = (make_data((n,) + shape, dtype, g) / 8).to(dev)
        both(lambda: tdo.scatter_nd(x, i, u, reduction))


@over_backends("dtype,reduction", [(d, r) for d in DATA_DTYPES
                                   if d not in (torch.float16, torch.bfloat16)
                                   for r in REDUCTIONS], triton=False)
def test_scatter_every_reduction_against_the_oracle(any_backend, dtype, reduction):
    """Duplicates (30 tuples into 20 rows) outside deterministic mode: "none" keeps the last in
    index order on the CPU backends, the reductions apply every duplicate; functional, out= and
    in place agree.  (Triton's float add is atomic: test_scatter_nd_triton.py.)"""
    cpp_covers(any_backend, "scatter_nd", "scatter_nd_out", "scatter_nd_")
    x = make_data((4, 5, 6), dtype)
    i = make_indices((30,), (4, 5), torch.int32, negative=True)
    u = make_updates(x, i)
    expected = scatter_nd_ref(x, i, u, reduction)
    res = tdo.scatter_nd(x, i, u, reduction)
    if dtype.is_floating_point:
        torch.testing.assert_close(res, expected, rtol=0, atol=0, equal_nan=True)
    else:
        bits_equal(res, expected)
    out = torch.empty_like(x)
    tdo.scatter_nd(x, i, u, reduction, out=out)
    bits_equal(out, res)
    y = x.clone()
    tdo.scatter_nd_(y, i, u, reduction)
    bits_equal(y, res)


@over_backends("index_dtype,row_elems", [(d, n) for d in INDEX_DTYPES for n in (1, 2, 4, 5, 64)],
               only=("native",))
def test_scatter_duplicates_last_wins_on_any_thread_count(any_backend, num_threads, index_dtype,
                                                          row_elems):
    """The C++ kernels: rows never mix and the last duplicate in index order wins, outside
    deterministic mode too, on 1, 2 or 4 threads."""
    cpp_covers(any_backend, "scatter_nd")
    x = torch.zeros(8, row_elems)
    i = torch.randint(0, 8, (500, 1)).to(index_dtype)
    u = torch.arange(500, dtype=torch.float32).unsqueeze(1).expand(500, row_elems).contiguous()
    last = {}
    for t, r in enumerate(i.view(-1).tolist()):
        last[r] = t
    for threads in (1, 2, 4):
        num_threads(threads)
        res = tdo.scatter_nd(x, i, u)
        for r in range(8):
            assert torch.all(res[r] == (last[r] if r in last else 0)), (threads, r)


@over_backends("row_elems", [1, 4, 5], only=("native",))
def test_scatter_last_wins_when_rows_are_split_among_threads(any_backend, num_threads,
                                                             row_elems):
    """Enough tuples, into a destination large enough (16 MiB), that the C++ overwrite splits
    the destination rows among the threads (each part writes its own rows; short rows of other
    parts go to a sink, branch-free): the last duplicate in index order still wins, in place and
    functional, and a bad tuple skipped by check_indices=False writes nothing."""
    cpp_covers(any_backend, "scatter_nd")
    g = torch.Generator().manual_seed(0)
    n, rows = 200_000, split_rows(4 * row_elems)
    i = torch.randint(0, rows // 64, (n, 1), generator=g) * 64      # duplicates everywhere
    i[::97] = rows + 5
    u = torch.arange(n, dtype=torch.float32).unsqueeze(1).expand(n, row_elems).contiguous()
    # the last tuple of a row is its largest t (u holds t): the rows' maxima
    ok = i.view(-1) < rows
    last = torch.full((rows,), -1.0).scatter_reduce(0, i.view(-1)[ok], u[ok, 0], "amax")
    want = last.unsqueeze(1).expand(rows, row_elems)
    x = torch.full((rows, row_elems), -1.0)
    for threads in (1, 2, 4):
        num_threads(threads)
        assert torch.equal(tdo.scatter_nd(x, i, u, check_indices=False), want), threads
        y = x.clone()
        tdo.scatter_nd_(y, i, u, check_indices=False)
        assert torch.equal(y, want), threads


@over_backends("reduction", REDUCTIONS, only=OTHERS)
def test_scatter_layouts_match_portable(both, num_threads, deterministic, dev, reduction):
    """Strided input / indices / updates / out, in place on a strided tensor, DML form, empty."""
    num_threads(2)
    x = make_data((7, 6, 5), torch.float64).to(dev)
    i = make_indices((50,), (7, 6), torch.int64, negative=True).to(dev)
    u = make_updates(x.cpu(), i.cpu()).to(dev)
    xs = x.transpose(0, 2).contiguous().transpose(0, 2)

    def inplace(t):
        def f():
            y = t.clone() if t.is_contiguous() else t.transpose(0, 2).clone().transpose(0, 2)
            tdo.scatter_nd_(y, i, u, reduction)
            return y
        return f

    def with_out(o):
        def f():
            o.fill_(3.0)
            return tdo.scatter_nd(x, i, u, reduction, out=o).clone()
        return f
    f64 = dict(dtype=torch.float64, device=dev)
    cases = [
        lambda: tdo.scatter_nd(xs, i, u, reduction),
        lambda: tdo.scatter_nd(x, strided_like(i), strided_like(u), reduction),
        inplace(x), inplace(xs),
        with_out(torch.empty(7, 6, 5, **f64)),
        with_out(torch.empty(5, 6, 7, **f64).transpose(0, 2)),
        lambda: tdo.scatter_nd(x, i[:0], u[:0], reduction),
        lambda: tdo.scatter_nd(torch.zeros(7, 6, 0, **f64), i, torch.zeros(50, 0, **f64),
                               reduction),
        lambda: tdo.scatter_nd(x.reshape(1, 7, 6, 5), i.reshape(1, 1, 50, 2),
                               u.reshape(1, 1, 50, 5), reduction, input_dimension_count=3,
                               indices_dimension_count=2),
    ]
    for fn in cases:
        both(fn)


def _one_write_cases():
    """(name, write, target maker): every way a call writes a caller's tensor (contiguous,
    strided, negative-bit targets; strided sources; calls without tuples)."""
    i, u = torch.tensor([[1], [2]]), torch.ones(2, 3)
    x, xt = torch.zeros(4, 3), torch.zeros(3, 4).t()

    def contig(*shape):
        return lambda dev: torch.zeros(*shape, device=dev)

    def transposed(*shape):
        return lambda dev: torch.zeros(*reversed(shape), device=dev).t()

    def negative(*shape):
        return lambda dev: torch._neg_view(torch.zeros(*shape, device=dev))

    def scatter_out(inp, n=2):
        return lambda t: tdo.scatter_nd(inp.to(t.device), i[:n].to(t.device),
                                        u[:n].to(t.device), out=t)

    def scatter_(n=2, reduction="none"):
        return lambda t: tdo.scatter_nd_(t, i[:n].to(t.device), u[:n].to(t.device), reduction)

    def gather_out(n=2):
        return lambda t: tdo.gather_nd(x.to(t.device), i[:n].to(t.device), out=t)

    return [
        ("scatter_out", scatter_out(x), contig(4, 3)),
        ("scatter_out-strided_out", scatter_out(x), transposed(4, 3)),
        ("scatter_out-strided_input", scatter_out(xt), contig(4, 3)),
        ("scatter_out-negative_out", scatter_out(x), negative(4, 3)),
        ("scatter_out-no_tuples-strided_out", scatter_out(x, 0), transposed(4, 3)),
        ("scatter_out-no_tuples-strided_input", scatter_out(xt, 0), contig(4, 3)),
        ("scatter_", scatter_(), contig(4, 3)),
        ("scatter_-add", scatter_(reduction="add"), contig(4, 3)),
        ("scatter_-strided", scatter_(), transposed(4, 3)),
        ("scatter_-negative", scatter_(), negative(4, 3)),
        ("scatter_-no_tuples", scatter_(0), contig(4, 3)),
        ("gather_out", gather_out(), contig(2, 3)),
        ("gather_out-strided", gather_out(), transposed(2, 3)),
        ("gather_out-negative", gather_out(), negative(2, 3)),
        ("gather_out-no_tuples", gather_out(0), contig(0, 3)),
    ]


@over_backends("case", [pytest.param(c, id=c[0]) for c in _one_write_cases()])
def test_a_write_bumps_the_version_once(any_backend, dev, case):
    """Like torch's in-place and out= ops, one call that writes a caller's tensor records one
    write on its version counter, whatever the layouts, the backend or the path inside."""
    name, write, make = case
    t = make(dev)
    v = t._version
    write(t)
    assert t._version == v + 1, f"{name}: {t._version - v} writes recorded"


@over_backends("write", ["scatter_nd_", "scatter_nd_out", "gather_nd_out"])
def test_a_negative_inference_target_shows_what_was_written(any_backend, dev, write):
    """Inside inference mode, a negative-bit inference tensor is written through its negation
    like any other negative view (torch's is_neg() of it, asked from C++, reads false)."""
    x = torch.arange(12., device=dev).reshape(4, 3)
    i, u = torch.tensor([[1], [2]], device=dev), torch.full((2, 3), 5., device=dev)
    with torch.inference_mode():
        if write == "gather_nd_out":
            t = torch._neg_view(torch.zeros(2, 3, device=dev))
            tdo.gather_nd(x, i, out=t)
            want = x[1:3]
        else:
            t = torch._neg_view(x.clone())
            if write == "scatter_nd_":
                tdo.scatter_nd_(t, i, u)
            else:
                tdo.scatter_nd(x, i, u, out=t)
            want = torch.cat([-x[:1], u, -x[3:]]) if write == "scatter_nd_" else \
                torch.cat([x[:1], u, x[3:]])
        assert t.is_neg() and torch.equal(t.resolve_neg(), want), t


# ------------------------------------------------------------------ property test

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402


@st.composite
def gather_scatter_problems(draw):
    r = draw(st.integers(1, 5))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=r, max_size=r)))
    b = draw(st.integers(0, r - 1))
    k = draw(st.integers(1, r - b))
    n = draw(st.integers(0, 40))
    dtype = draw(st.sampled_from(DATA_DTYPES))
    idx_dtype = draw(st.sampled_from(INDEX_DTYPES))
    reduction = draw(st.sampled_from(REDUCTIONS))
    bad = draw(st.sampled_from([None, 0, 1, -1]))
    seed = draw(st.integers(0, 2**16))
    threads = draw(st.sampled_from([1, 2]))
    return shape, b, k, n, dtype, idx_dtype, reduction, bad, seed, threads


def _run(fn, name):
    with tdo._backend.override(name):
        try:
            return fn(), None
        except IndexError as e:
            return None, str(e)


@pytest.mark.parametrize("name", [backend_param("native")])
@given(gather_scatter_problems())
def test_property_gather_scatter_match_portable(name, problem):
    shape, b, k, n, dtype, idx_dtype, reduction, bad, seed, threads = problem
    g = torch.Generator().manual_seed(seed)
    x = make_data(shape, dtype, g)
    i = make_indices(shape[:b] + (n,), shape[b:b + k], idx_dtype, negative=True, generator=g)
    if bad is not None and i.numel():
        flat = i.view(-1)
        flat[bad % flat.numel()] = 5      # every dim has size <= 4
    prev_t = torch.get_num_threads()
    torch.set_num_threads(threads)
    prev_det = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        fns = [lambda: tdo.gather_nd(x, i, b)]
        if b == 0:
            u = make_updates(x, i, g)
            fns.append(lambda: tdo.scatter_nd(x, i, u, reduction))
        for fn in fns:
            (a, ea), (c, ec) = _run(fn, "torch"), _run(fn, name)
            assert ea == ec
            if a is not None:
                bits_equal(c, a)
    finally:
        torch.set_num_threads(prev_t)
        torch.use_deterministic_algorithms(prev_det)


# =============================================================================================
# 4. top_k1
# =============================================================================================

def check_top_k1(x, k, axis, direction, index_dtype=torch.int64, oracle=True, dev="cpu"):
    """The backend in force against the portable path (values' bits, indices, dtypes, layout)
    and, when ``oracle``, against the loop oracle; returns the result."""
    xd = x.to(dev)
    got = tdo.top_k1(xd, k, axis, direction, index_dtype)
    with tdo._backend.override("torch"):
        want = tdo.top_k1(xd, k, axis, direction, index_dtype)
    assert got.values.dtype == x.dtype and got.indices.dtype == index_dtype
    assert got.values.shape == want.values.shape and got.indices.shape == want.indices.shape
    assert got.values.is_contiguous() and got.indices.is_contiguous()
    np.testing.assert_array_equal(to_bits(got.values), to_bits(want.values))
    np.testing.assert_array_equal(got.indices.cpu().to(torch.int64).numpy(),
                                  want.indices.cpu().to(torch.int64).numpy())
    if oracle:
        bits, i = top_k1_ref(x, k, axis % x.dim(), direction == "decreasing")
        np.testing.assert_array_equal(to_bits(got.values), bits)
        np.testing.assert_array_equal(got.indices.cpu().to(torch.int64).numpy(), i)
    return got


#: top_k1 runs a few calls under the interpreter only: its kernels cost seconds per call there
#: (tests/test_top_k1_triton.py covers them).
CPU_BACKENDS = ("torch", "native")


@over_backends("dtype,direction,index_dtype",
               [(d, r, i) for d in DATA_DTYPES for r in DIRS for i in TOPK_INDEX],
               only=CPU_BACKENDS)
def test_top_k1_dtypes_ties_and_k(any_backend, dtype, direction, index_dtype):
    cpp_covers(any_backend, "top_k1")
    g = torch.Generator().manual_seed(3)
    rand = make_data((5, 70), dtype, g)
    ties = torch.randint(0, 4, (5, 70), generator=g).to(dtype)        # values 0..3
    for x in (rand, ties):
        for k in (1, 3, 35, 69, 70):
            check_top_k1(x, k, -1, direction, index_dtype)


@over_backends("dtype,direction", [(d, r) for d in (torch.float32, torch.float16, torch.bfloat16,
                                                    torch.float64) for r in DIRS],
               only=CPU_BACKENDS)
def test_top_k1_nan_inf_signed_zero_payloads(any_backend, dtype, direction):
    cpp_covers(any_backend, "top_k1")
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([0.0, nan, -0.0, inf, -inf, 1.0, nan, 0.0, -1.0, -0.0, 5.0, -nan] * 6,
                     dtype=dtype)
    # NaNs with other payloads and signs: all equal, above +inf, copied back bit for bit.
    ibits = {torch.float32: torch.int32, torch.float64: torch.int64}.get(dtype, torch.int16)
    bits = x.view(ibits).clone()
    payload = {torch.float32: [0x7FC00001, -0x003FFFFF, 0x7F800001],
               torch.float64: [0x7FF8000000000001, -0x7FFFFFFFFFFFF, 0x7FF0000000000001],
               torch.float16: [0x7E01, -0x01FF, 0x7C01],
               torch.bfloat16: [0x7FC1, -0x003F, 0x7F81]}[dtype]
    for j, p in enumerate(payload):
        bits[13 + 17 * j] = p
    x = bits.view(dtype)
    # Both paths copy the bits back (the portable path's value gather once quieted float16
    # signalling NaNs and rewrote bfloat16 NaNs; it now moves them as integers).
    for k in (1, 2, 3, 5, 9, 20, 40, 72):
        check_top_k1(x, k, 0, direction)
    check_top_k1(x.reshape(6, 12), 4, 1, direction)


@over_backends("shape,direction", [(s, r) for s in ((4, 5, 6), (3, 4, 2, 5)) for r in DIRS],
               only=CPU_BACKENDS)
def test_top_k1_every_axis(any_backend, shape, direction):
    cpp_covers(any_backend, "top_k1")
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 4, shape, generator=g).float()
    for axis in range(-len(shape), len(shape)):
        n = shape[axis]
        for k in sorted({1, (n + 1) // 2, n}):
            check_top_k1(x, k, axis, direction, torch.int32)


@over_backends("r", list(range(1, 9)), only=CPU_BACKENDS)
def test_top_k1_ranks_1_to_8(any_backend, r):
    cpp_covers(any_backend, "top_k1")
    g = torch.Generator().manual_seed(r)
    shape = tuple(int(s) for s in torch.randint(1, 4, (r,), generator=g))
    x = torch.randint(0, 3, shape, generator=g).to(torch.int16)
    for axis in range(r):
        for d in DIRS:
            check_top_k1(x, shape[axis], axis, d)
            check_top_k1(x, 1, axis, d)


@over_backends("layout", ["transposed", "sliced", "expanded", "offset"], only=CPU_BACKENDS)
def test_top_k1_non_contiguous_layouts(any_backend, layout):
    cpp_covers(any_backend, "top_k1")
    g = torch.Generator().manual_seed(6)
    base = torch.randint(0, 5, (6, 8, 5), generator=g).float()
    x = {"transposed": base.transpose(0, 2), "sliced": base[::2, 1::3],
         "expanded": torch.randint(0, 5, (1, 8, 1), generator=g).float().expand(6, 8, 5),
         "offset": base.reshape(-1)[7:207].reshape(10, 20)}[layout]
    for axis in range(x.dim()):
        for d in DIRS:
            check_top_k1(x, min(3, x.shape[axis]), axis, d)


@over_backends("shape,axis", [((0, 5), 1), ((3, 0, 4), 2), ((2, 5, 0), 1), ((0,), 0)],
               only=CPU_BACKENDS)
def test_top_k1_empty(any_backend, shape, axis):
    x = torch.empty(shape)
    if x.shape[axis] == 0:
        # (issue 38: the message was "K must be in [1, 0]")
        with pytest.raises(ValueError, match=rf"has size 0 along Axis {axis % x.dim()} \(sizes "
                                             rf"{re.escape(str(shape))}\): there is nothing to "
                                             rf"select, and K must be at least 1 \(got 1\)"):
            tdo.top_k1(x, 1, axis, "decreasing", torch.int64)
        return
    res = check_top_k1(x, 2, axis, "decreasing", torch.uint32, oracle=False)
    want = list(shape)
    want[axis] = 2
    assert list(res.values.shape) == want and res.indices.dtype == torch.uint32


@over_backends("", [()])
def test_top_k1_grad_scatters_back(any_backend, dev):
    x = torch.tensor([[1.0, 5.0, 3.0, 5.0]], device=dev, requires_grad=True)
    res = tdo.top_k1(x, 2)
    (res.values * torch.tensor([[10.0, 20.0]], device=dev)).sum().backward()
    assert x.grad.tolist() == [[0.0, 10.0, 0.0, 20.0]]


@st.composite
def topk_problems(draw):
    r = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 40), min_size=r, max_size=r)))
    axis = draw(st.integers(-r, r - 1))
    k = draw(st.integers(1, shape[axis]))
    dtype = draw(st.sampled_from(DATA_DTYPES))
    direction = draw(st.sampled_from(DIRS))
    span = draw(st.sampled_from([2, 4, 1000]))
    index_dtype = draw(st.sampled_from(TOPK_INDEX))
    threads = draw(st.sampled_from([1, 2, 3]))
    seed = draw(st.integers(0, 2 ** 16))
    return shape, axis, k, dtype, direction, span, index_dtype, threads, seed


@pytest.mark.parametrize("name", [backend_param("native")])
@given(topk_problems())
def test_property_top_k1_matches_portable_and_oracle(name, problem):
    shape, axis, k, dtype, direction, span, index_dtype, threads, seed = problem
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, span, shape, generator=g) - (span // 2 if dtype.is_signed else 0)
    x = x.to(dtype) if dtype != torch.bool else x.bool()
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with tdo._backend.override(name):
            check_top_k1(x, k, axis, direction, index_dtype)
    finally:
        torch.set_num_threads(saved)


# =============================================================================================
# 5. uint64 data
# =============================================================================================

# values around the sign bit and the ends of the range, plus small ones
U64_POOL = [0, 1, 2, 5, 2**31, 2**32 + 3, 2**62, 2**63 - 1, 2**63, 2**63 + 1, 2**63 + 5,
            U64 - 2, U64 - 1, 12345678901234567890]


def _pick(g, n, pool=U64_POOL):
    return [pool[int(v)] for v in torch.randint(0, len(pool), (n,), generator=g)]


def _u64_values(g, n, pool=None):
    """n values, half of them at or above 2**63, drawn from a small pool when given (ties)."""
    hi = torch.randint(0, 2, (n,), generator=g).tolist()
    lo = torch.randint(0, 2 ** 62 if pool is None else pool, (n,), generator=g).tolist()
    return [(1 << 63) + v if h else v for h, v in zip(hi, lo)]


def scatter_oracle(data, coords, upd, reduction, slice_len):
    """uint64 scatter in index order with unsigned wraparound and order."""
    out = list(data)
    for t, row in enumerate(coords):
        for s in range(slice_len):
            p, u = row * slice_len + s, upd[t * slice_len + s]
            cur = out[p]
            out[p] = {"none": u, "add": (cur + u) % U64, "mul": (cur * u) % U64,
                      "max": max(cur, u), "min": min(cur, u)}[reduction]
    return out


def topk_oracle(values, k, largest):
    """Stable: by value in the direction, ties by the lower index: (values, indices)."""
    order = sorted(range(len(values)), key=lambda p: (-values[p] if largest else values[p], p))
    return [values[p] for p in order[:k]], order[:k]


@over_backends("index_dtype,layout", [(d, lay) for d in INDEX_DTYPES
                                      for lay in ("contiguous", "strided")])
def test_uint64_gather(any_backend, dev, index_dtype, layout):
    cpp_covers(any_backend, "gather_nd", "gather_nd_out")
    g = torch.Generator().manual_seed(4)
    vals = _u64_values(g, 6 * 5)
    x = u64(vals, (6, 5), dev)
    tuples = [[5], [0], [3], [3], [1]]

    def index(rows):
        i = idx([v for r in rows for v in r], index_dtype, (len(rows), len(rows[0])), dev)
        return strided_like(i) if layout == "strided" else i
    i = index(tuples)
    got = tdo.gather_nd(x, i)
    assert got.dtype == torch.uint64 and got.shape == (5, 5)
    assert as_ints(got) == [vals[r[0] * 5 + c] for r in tuples for c in range(5)]
    out = torch.zeros(5, 5, dtype=torch.uint64, device=dev)
    tdo.gather_nd(x, i, out=out)
    assert as_ints(out) == as_ints(got)
    i2 = index([[5, 4], [0, 0], [2, 3]])                               # element gather
    assert as_ints(tdo.gather_nd(x, i2)) == [vals[29], vals[0], vals[13]]


@over_backends("reduction,index_dtype,layout",
               [(r, d, lay) for r in REDUCTIONS for d in (torch.int64, torch.int32, torch.uint64)
                for lay in ("contiguous", "strided")],
               triton=lambda r, d, lay: d == torch.int64)
def test_uint64_scatter(any_backend, dev, reduction, index_dtype, layout):
    """Unsigned wraparound for add/mul, unsigned order for max/min (2**63 + x above 5),
    duplicates in index order; functional, out= and in-place."""
    cpp_covers(any_backend, "scatter_nd", "scatter_nd_out", "scatter_nd_")
    g = torch.Generator().manual_seed(5)
    shape = (6, 3)
    vals = _u64_values(g, 18)
    vals[:3] = [U64 - 1, 1 << 63, 5]                      # wraps on add, mul; order extremes
    tuples = [[0], [4], [0], [-1 if index_dtype != torch.uint64 else 5], [4], [0]]
    upd = _u64_values(g, 6 * 3)
    upd[:3] = [2, 3, (1 << 63) + 7]
    want = scatter_oracle(vals, [r % 6 for (r,) in tuples], upd, reduction, 3)
    x = u64(vals, shape, dev)
    i = idx([r for (r,) in tuples], index_dtype, (6, 1), dev)
    u = u64(upd, (6, 3), dev)
    if layout == "strided":
        x, i, u = strided_like(x), strided_like(i), strided_like(u)
    # "none" keeps the last duplicate: the C++ kernels always, the others in deterministic mode
    prev = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(any_backend != "native")
    try:
        assert as_ints(tdo.scatter_nd(x, i, u, reduction)) == want
        assert as_ints(x) == vals                                      # functional: input intact
        out = torch.zeros(shape, dtype=torch.uint64, device=dev)
        tdo.scatter_nd(x, i, u, reduction, out=out)
        assert as_ints(out) == want
        tdo.scatter_nd_(x, i, u, reduction)
        assert as_ints(x) == want
    finally:
        torch.use_deterministic_algorithms(prev)


@over_backends("direction,index_dtype,axis",
               [(r, d, a) for r in DIRS for d in TOPK_INDEX for a in (-1, 0)])
def test_uint64_top_k1(any_backend, dev, direction, index_dtype, axis):
    """Unsigned order (2**63 + x above every smaller value), ties by lower index first."""
    cpp_covers(any_backend, "top_k1")
    g = torch.Generator().manual_seed(6)
    rows, n = 4, 90
    vals = _u64_values(g, rows * n, pool=6)                  # few distinct values: many ties
    vals[:4] = [U64 - 1, 0, 1 << 63, (1 << 63) - 1]
    x = u64(vals, (rows, n), dev)
    if axis == 0:
        x = x.t()                                                     # non-contiguous, [n, rows]
    largest = direction == "decreasing"
    for k in (1, 3, 33, n):
        res = tdo.top_k1(x, k, axis, direction, index_dtype)
        assert res.values.dtype == torch.uint64 and res.indices.dtype == index_dtype
        v = as_ints(res.values.movedim(axis, -1))
        i = res.indices.movedim(axis, -1).cpu().to(torch.int64).reshape(-1).tolist()
        for r in range(rows):
            want_v, want_i = topk_oracle(vals[r * n:(r + 1) * n], k, largest)
            assert v[r * k:(r + 1) * k] == want_v
            assert i[r * k:(r + 1) * k] == want_i


@over_backends("call", ["gather", "none", "add", "mul", "max", "min", "decreasing",
                        "increasing"], only=OTHERS)
def test_uint64_matches_portable(both, deterministic, dev, call):
    """Bit for bit with the portable path on uint64 (values above 2**63, duplicates, ties)."""
    g = torch.Generator().manual_seed(8)
    x = u64(_u64_values(g, 8 * 40, pool=4), (8, 40), dev)
    i = torch.randint(-8, 8, (30, 1), generator=g).to(dev)
    u = u64(_u64_values(g, 30 * 40), (30, 40), dev)
    if call == "gather":
        both(lambda: tdo.gather_nd(x, i))
    elif call in ("decreasing", "increasing"):
        both(lambda: tuple(tdo.top_k1(x, 13, -1, call, torch.int64)))
    else:
        both(lambda: tdo.scatter_nd(x, i, u, call))


@over_backends("index_dtype,path", [(d, p) for d in (torch.int64, torch.int32, torch.uint64)
                                    for p in PATHS], triton=small_path, native=small_path)
def test_gather_nd_uint64_moves_bits(dev, index_dtype, path, monkeypatch):
    n = tuples_for(path, monkeypatch)
    g = torch.Generator().manual_seed(n)
    data = _pick(g, 7 * 5 * 3)
    x = u64(data, (7, 5, 3), dev)
    rows = torch.randint(0, 7 * 5, (n,), generator=g).tolist()
    i = make_index_tensor([v for r in rows for v in (r // 5, r % 5)], index_dtype, 2, dev)
    got = tdo.gather_nd(x, i)
    assert got.dtype == torch.uint64 and got.shape == (n, 3)
    assert as_ints(got) == [data[r * 3 + s] for r in rows for s in range(3)]
    # k = 3 (element gather), non-contiguous input, out=
    xt = x.transpose(0, 1)
    i3 = make_index_tensor([v for r in rows for v in (r % 5, r // 5, r % 3)], index_dtype, 3,
                           dev)
    got3 = tdo.gather_nd(xt, i3)
    assert as_ints(got3) == [data[(r // 5) * 15 + (r % 5) * 3 + r % 3] for r in rows]
    out = torch.empty(n, dtype=torch.uint64, device=dev)
    tdo.gather_nd(x.contiguous(), i3.index_select(1, torch.tensor([1, 0, 2], device=dev)),
                  out=out)
    assert as_ints(out) == as_ints(got3)


@over_backends("reduction,slice_len,path", [(r, s, p) for r in REDUCTIONS for s in (1, 3)
                                            for p in PATHS], triton=small_path,
               native=small_path)
def test_scatter_nd_uint64_unsigned_semantics(dev, reduction, slice_len, path, monkeypatch):
    n = tuples_for(path, monkeypatch)
    g = torch.Generator().manual_seed(n + slice_len)
    rows = 6
    data = _pick(g, rows * slice_len)
    upd = _pick(g, n * slice_len)
    coords = torch.randint(0, rows, (n,), generator=g).tolist()
    if reduction == "none":           # without duplicates: any backend's "none" is exact
        coords = list(range(min(n, rows)))
        n = len(coords)
        upd = upd[: n * slice_len]
    x = u64(data, (rows, slice_len), dev)
    u = u64(upd, (n, slice_len), dev)
    i = torch.tensor(coords).reshape(n, 1).to(dev)
    want = scatter_oracle(data, coords, upd, reduction, slice_len)
    got = tdo.scatter_nd(x, i, u, reduction)
    assert got.dtype == torch.uint64
    assert as_ints(got) == want
    assert as_ints(x) == data, "the functional scatter modified its input"
    # in place, and into a strided out=
    y = x.clone()
    tdo.scatter_nd_(y, i, u, reduction)
    assert as_ints(y) == want
    out = torch.empty(slice_len, rows, dtype=torch.uint64, device=dev).t()
    tdo.scatter_nd(x, i, u, reduction, out=out)
    assert as_ints(out) == want


@over_backends("direction,n,k", [(r, n, k) for r in DIRS for n, k in
                                 [(1, 1), (7, 1), (7, 3), (7, 7), (600, 1), (600, 5),
                                  (3000, 40)]])
def test_top_k1_uint64_unsigned_stable_order(dev, direction, n, k):
    g = torch.Generator().manual_seed(n * 100 + k)
    rows = [_pick(g, n) for _ in range(3)]        # few distinct values: many ties
    x = u64([v for r in rows for v in r], (3, n), dev)
    largest = direction == "decreasing"
    for index_dtype in (torch.int64, torch.uint32):
        vals, i = tdo.top_k1(x, k, -1, direction, index_dtype)
        assert vals.dtype == torch.uint64 and i.dtype == index_dtype
        for r in range(3):
            want_v, want_i = topk_oracle(rows[r], k, largest)
            assert as_ints(vals[r]) == want_v
            assert i[r].cpu().to(torch.int64).tolist() == want_i
    # along another axis (a strided row)
    vt, it = tdo.top_k1(x.t().contiguous(), k, 0, direction)
    vals, i = tdo.top_k1(x, k, -1, direction)
    assert torch.equal(vt.t().view(torch.int64), vals.view(torch.int64))
    assert torch.equal(it.t(), i)


@over_backends("", [()])
def test_top_k1_uint64_sign_bit_orders_above(dev):
    x = u64([5, 2**63, 2**63 - 1, U64 - 1, 0, 2**63], device=dev)
    v, i = tdo.top_k1(x, 6)
    assert as_ints(v) == [U64 - 1, 2**63, 2**63, 2**63 - 1, 5, 0]
    assert i.tolist() == [3, 1, 5, 2, 0, 4]
    v, i = tdo.top_k1(x, 3, direction="increasing")
    assert as_ints(v) == [0, 5, 2**63 - 1] and i.tolist() == [4, 0, 2]


POOL = [0, 1, 7, 2**32 + 1, 2**62, 2**63 - 1, 2**63, 2**63 + 3, U64 - 2, U64 - 1]


def u64_data(shape, seed, dev):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.tensor(shape).prod())
    return u64(_pick(g, n, POOL), shape, dev)


@over_backends("index_dtype", INDEX_DTYPES, only=OTHERS)
def test_gather_nd_uint64_data_matches_portable(both, dev, index_dtype):
    x = u64_data((6, 5, 3), 1, dev)
    i = idx([5, 4, 0, 0, 3, 2, 5, 4, 1, 1], index_dtype, (5, 2), dev)
    both(lambda: tdo.gather_nd(x, i), kernel=True)
    both(lambda: tdo.gather_nd(x, idx([5, 4, 2, 0, 0, 0], index_dtype, (2, 3), dev)),
         kernel=True)
    both(lambda: tdo.gather_nd(x.transpose(0, 1), idx([4, 5, 0, 1], index_dtype, (2, 2), dev)),
         kernel=True)


@over_backends("reduction,kernel,slice_len",
               [(r, kern, s) for r, kern in [("none", True), ("add", True), ("mul", False),
                                             ("max", False), ("min", False)] for s in (1, 3)],
               only=OTHERS)
def test_scatter_nd_uint64_data_matches_portable(both, deterministic, dev, reduction, kernel,
                                                 slice_len):
    """Triton: none/add run in the kernel (bits, and wrapping adds on the int64 twin);
    mul/max/min need unsigned arithmetic or order and fall back to the portable path.
    Deterministic mode: "none" keeps the last duplicate on every backend."""
    x = u64_data((6, slice_len), 2, dev)
    i = idx([1, 4, 1, 0, 5, 4, 1], torch.int64, (7, 1), dev)
    u = u64_data((7, slice_len), 3, dev)
    both(lambda: tdo.scatter_nd(x, i, u, reduction), kernel=kernel)

    def inplace():
        y = x.clone()
        tdo.scatter_nd_(y, i, u, reduction)
        return y
    both(inplace, kernel=kernel)


@over_backends("", [()], only=OTHERS)
def test_scatter_nd_uint64_add_wraps(both, dev):
    x = u64([U64 - 1, 2**63], (2,), dev)
    u = u64([2, U64 - 1, 2**63], (3,), dev)
    _, got = both(lambda: tdo.scatter_nd(x, torch.tensor([[0], [1], [1]], device=dev), u, "add"),
                  kernel=True)
    assert as_ints(got) == [1, (2**63 + U64 - 1 + 2**63) % U64]


@pytest.mark.parametrize("direction", DIRS)
@over_backends("", [()], only=OTHERS)
def test_top_k1_uint64_matches_portable(both, any_backend, dev, direction):
    """Triton has no uint64 top-k kernel: the portable path runs (no launch)."""
    if any_backend == "triton":
        from torch_dml_ops.triton_kernels import top_k1_triton_supports
        assert not top_k1_triton_supports(torch.uint64, 3)
    x = u64_data((4, 37), 4, dev)
    both(lambda: tuple(tdo.top_k1(x, 5, -1, direction)), kernel=False)
    both(lambda: tuple(tdo.top_k1(x, 4, 0, direction, torch.uint32)), kernel=False)


# =============================================================================================
# 6. Tensors whose storage was resized away
# =============================================================================================

def _freed(t):
    t.untyped_storage().resize_(0)
    return t


def _operands(layout, dev):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 4, generator=g).to(dev)
    i = torch.tensor([[1], [6], [-2]], device=dev)
    u = torch.randn(3, 4, generator=g).to(dev)
    if layout == "strided":
        x, i, u = strided_like(x), strided_like(i), strided_like(u)
    return x, i, u


def _out(shape, layout, dev):
    o = torch.full(shape, 7.0, device=dev)
    return strided_like(o) if layout == "strided" else o


# case: (op, role, which tensor is freed, the tensor that must stay intact)
_STORAGE_CASES = {
    "gather-input": ("gather_nd", "InputTensor", "x", None),
    "gather-indices": ("gather_nd", "IndicesTensor", "i", None),
    "gather_out-input": ("gather_nd", "InputTensor", "x", "out"),
    "gather_out-indices": ("gather_nd", "IndicesTensor", "i", "out"),
    "gather_out-out": ("gather_nd", "OutputTensor (out)", "out", "out"),
    "scatter-input": ("scatter_nd", "InputTensor", "x", None),
    "scatter-indices": ("scatter_nd", "IndicesTensor", "i", None),
    "scatter-updates": ("scatter_nd", "UpdatesTensor", "u", None),
    "scatter_out-input": ("scatter_nd", "InputTensor", "x", "out"),
    "scatter_out-indices": ("scatter_nd", "IndicesTensor", "i", "out"),
    "scatter_out-updates": ("scatter_nd", "UpdatesTensor", "u", "out"),
    "scatter_out-out": ("scatter_nd", "OutputTensor (out)", "out", "out"),
    "scatter_-input": ("scatter_nd_", "InputTensor", "x", None),
    "scatter_-indices": ("scatter_nd_", "IndicesTensor", "i", "x"),
    "scatter_-updates": ("scatter_nd_", "UpdatesTensor", "u", "x"),
    "top_k1-input": ("top_k1", "InputTensor", "x", None),
}


def _call(op, x, i, u, out, reduction):
    if op == "gather_nd":
        return tdo.gather_nd(x, i, out=out)
    if op == "scatter_nd":
        return tdo.scatter_nd(x, i, u, reduction, out=out)
    if op == "scatter_nd_":
        return tdo.scatter_nd_(x, i, u, reduction)
    return tdo.top_k1(x, 2, 0, "decreasing", torch.int64)     # axis 0: a transposing copy


def _storage_params():
    for case, (op, *_) in _STORAGE_CASES.items():
        for reduction in (["none", "add"] if op.startswith("scatter") else ["none"]):
            for layout in ("contiguous", "strided"):
                yield pytest.param(case, reduction, layout, id=f"{case}-{reduction}-{layout}")


@over_backends("case,reduction,layout", list(_storage_params()))
def test_freed_storage_raises(dev, case, reduction, layout):
    """Every tensor a kernel reads or writes: a RuntimeError naming it (no segfault, no
    garbage), and the caller's out= / in-place target left as it was."""
    op, role, freed, keep = _STORAGE_CASES[case]
    x, i, u = _operands(layout, dev)
    out = None
    if keep == "out" or freed == "out":
        out = _out((3, 4) if op == "gather_nd" else (8, 4), layout, dev)
    tensors = dict(x=x, i=i, u=u, out=out)
    intact = tensors[keep].clone() if keep and keep != freed else None
    t = tensors[freed]
    shape, stride, offset, es = t.shape, t.stride(), t.storage_offset(), t.element_size()
    need = (offset + sum((s - 1) * st for s, st in zip(shape, stride)) + 1) * es
    _freed(t)
    msg = (f"{op}: {role}'s storage has 0 bytes but the tensor needs {need} bytes (shape "
           f"{tuple(shape)}, stride {tuple(stride)}, storage offset {offset}, {es}-byte "
           f"elements; was its storage resized?)")
    with pytest.raises(RuntimeError) as e:
        _call(op, x, i, u, out, reduction)
    assert str(e.value) == msg
    if intact is not None:
        assert torch.equal(tensors[keep], intact)


@over_backends("op", ["gather_nd", "scatter_nd", "scatter_nd_", "top_k1"])
def test_shrunk_storage_and_offset(dev, op):
    """A storage shrunk by one element under a view with a storage offset: the exact byte
    counts (offset included) in the message, and the in-place target untouched."""
    base = torch.arange(40, dtype=torch.float64, device=dev).reshape(10, 4)
    x = base[2:]                                  # storage offset 8 elements
    i = torch.tensor([[0], [5]], device=dev)
    u = torch.full((2, 4), -1.0, dtype=torch.float64, device=dev)
    base.untyped_storage().resize_(39 * 8)
    before = base.untyped_storage().nbytes()
    snapshot = x[:-1].clone()                  # what is still inside the storage
    with pytest.raises(RuntimeError, match=r"InputTensor's storage has 312 bytes but the tensor "
                                           r"needs 320 bytes"):
        _call(op, x, i, u, None, "none")
    assert base.untyped_storage().nbytes() == before
    assert torch.equal(x[:-1], snapshot)


@over_backends("freed", ["i", "u"])
def test_freed_storage_checked_before_a_fallback(dev, freed):
    """float16 with a reduction (a call some kernels hand to the portable path) is checked all
    the same, and the in-place target stays intact."""
    x = torch.randn(8, 4, device=dev).half()
    i, u = torch.tensor([[1], [2]], device=dev), torch.randn(2, 4, device=dev).half()
    before = x.clone()
    _freed(dict(i=i, u=u)[freed])
    role = dict(i="IndicesTensor", u="UpdatesTensor")[freed]
    with pytest.raises(RuntimeError, match=f"scatter_nd_: {role}'s storage has 0 bytes"):
        tdo.scatter_nd_(x, i, u, "add")
    assert torch.equal(x, before)


@over_backends("", [()])
def test_empty_tensors_need_no_storage(dev):
    """A tensor with no elements addresses no byte, whatever its storage."""
    x = torch.randn(8, 4, device=dev)
    i = _freed(torch.zeros(0, 1, dtype=torch.int64, device=dev))
    assert tdo.gather_nd(x, i).shape == (0, 4)
    assert torch.equal(tdo.scatter_nd(x, i, _freed(torch.zeros(0, 4, device=dev))), x)
    xb = _freed(torch.zeros(0, 3, 4, device=dev))                    # an empty batch
    i2 = torch.zeros(0, 2, 1, dtype=torch.int64, device=dev)
    assert tdo.gather_nd(xb, i2, 1).shape == (0, 2, 4)


# =============================================================================================
# 7. The C++ kernels on torch's thread pool
# =============================================================================================
#
# The C++ kernels split a call into parts on torch's intra-op pool (at most
# torch.get_num_threads() and 64 parts, each with at least a grain of work: 2**15 element-steps
# for top_k1, whose rows fewer than the threads are split into segments of 2**15 elements or
# more).  The inputs below are large enough to be split; every thread count gives the same bits.

THREADS = (1, 2, 4)


def stable_order(x2d: torch.Tensor, largest: bool) -> np.ndarray:
    """Each row's positions in DirectML's order (best first, ties by the lower index), for
    NaN-free data: numpy's stable argsort."""
    if x2d.dtype == torch.uint64 or x2d.dtype == torch.bool or x2d.dtype == torch.uint8:
        a = to_bits(x2d)                         # unsigned: ~a reverses the order
        a = ~a if largest else a
    else:
        a = x2d.double().numpy() if x2d.dtype.is_floating_point else x2d.long().numpy()
        a = -a if largest else a
    return np.argsort(a, axis=-1, kind="stable")


def _check_against_order(res, x2d, k, order):
    i = res.indices.to(torch.int64).numpy()
    np.testing.assert_array_equal(i, order[:, :k])
    np.testing.assert_array_equal(to_bits(res.values),
                                  np.take_along_axis(to_bits(x2d), order[:, :k], axis=1))


@over_backends("dtype,shape", [(d, s) for d in (torch.float32, torch.int64, torch.uint8,
                                                torch.uint64, torch.bfloat16)
                               for s in ((1, 70000), (3, 70000), (200, 700))],
               only=("native",))
def test_top_k1_same_result_on_any_thread_count(any_backend, num_threads, dtype, shape):
    """Rows over threads, and rows fewer than the threads split into segments whose candidates
    are merged (some segments shorter than k), with ties across segments; k = 1 (block max),
    small k (sorted candidates), large k (buffered selections), k = n - 1."""
    cpp_covers(any_backend, "top_k1")
    g = torch.Generator().manual_seed(shape[0])
    rows, n = shape
    if dtype == torch.uint64:
        x = u64(_u64_values(g, rows * n, pool=9), shape)                # ties, sign bit set
    else:
        x = torch.randint(0, 9, shape, generator=g).to(dtype)          # ties everywhere
    for direction in DIRS:
        order = stable_order(x, direction == "decreasing")
        for k in sorted({1, 5, 40, min(1000, n - 1), n - 1}):
            first = None
            for threads in THREADS:
                num_threads(threads)
                res = tdo.top_k1(x, k, -1, direction)
                if first is None:
                    _check_against_order(res, x, k, order)
                    first = res
                else:
                    assert torch.equal(res.indices, first.indices), (threads, k, direction)
                    bits_equal(res.values, first.values, f"{threads} threads, k={k}")


@over_backends("direction", DIRS, only=("native",))
def test_top_k1_long_rows_orders_and_ties(any_backend, num_threads, direction):
    """Rows long enough for the real thresholds: the buffered scan with its threshold, repeated
    selections (ascending / descending data accept every element), segments on 2 threads;
    against the portable path."""
    cpp_covers(any_backend, "top_k1")
    num_threads(2)
    g = torch.Generator().manual_seed(9)
    n = 70000
    up = torch.arange(n, dtype=torch.float32)
    rows = [torch.randn(n, generator=g), up, up.flip(0), torch.zeros(n),
            torch.randint(0, 4, (n,), generator=g).float(),
            torch.randn(n, generator=g).round(decimals=1)]
    x = torch.stack(rows)
    for k in (1, 10, 100, 1000):
        check_top_k1(x, k, -1, direction, oracle=False)
        for r in range(len(rows)):
            check_top_k1(x[r:r + 1], k, -1, direction, oracle=False)
    check_top_k1(x[:1].double(), 500, -1, direction, oracle=False)
    check_top_k1(x[1:2].to(torch.int64), 300, -1, direction, oracle=False)
    check_top_k1(x[:, :4000], 4000, -1, direction, oracle=False)   # full sort


@over_backends("", [()], only=("native",))
def test_top_k1_1000_threads_large_k(any_backend, num_threads):
    """The report's case: 2**22 of 2**25 on one row asked for 1000 threads used to allocate
    ~32 GB of per-segment candidates (MemoryError): the parts are bounded (64) and so is their
    scratch (by the segment length).  Rounded to 0.01, so that ties abound, also across the
    k-th value.  Checked in O(n log n) at most: the right set (count above the k-th value,
    lowest indices among its ties), sorted, stable, values at the indices."""
    cpp_covers(any_backend, "top_k1")
    g = torch.Generator().manual_seed(0)
    n, k = 2 ** 25, 2 ** 22
    x = torch.randn(1, n, generator=g).round(decimals=2)
    num_threads(1000)
    res = tdo.top_k1(x, k)
    num_threads(2)
    v, i = res.values[0], res.indices[0]
    assert torch.equal(x[0, i], v)
    assert bool((v[:-1] >= v[1:]).all())
    tie = v[:-1] == v[1:]
    assert bool((i[1:][tie] > i[:-1][tie]).all())                     # stable among ties
    kth = v[-1]
    above = int((x[0] > kth).sum())
    assert above < k <= int((x[0] >= kth).sum())
    assert int((v > kth).sum()) == above
    ties_taken = i[v == kth]
    assert torch.equal(ties_taken, (x[0] == kth).nonzero()[: k - above, 0])
    assert i.unique().numel() == k


@over_backends("reduction,slice_len", [(r, s) for r in ("none", "add", "max") for s in (1, 3)],
               only=("native",))
def test_gather_scatter_same_result_on_any_thread_count(any_backend, num_threads, deterministic,
                                                        reduction, slice_len):
    """200000 tuples (duplicates everywhere) on 1, 2, 4 and an absurd 1000 threads: the parts
    are bounded, and the bits equal the portable path's."""
    cpp_covers(any_backend, "gather_nd", "scatter_nd")
    g = torch.Generator().manual_seed(slice_len)
    x = torch.randn(500, slice_len, generator=g).double()
    i = torch.randint(-500, 500, (200000, 1), generator=g)
    u = torch.randn(200000, slice_len, generator=g).double()
    with tdo._backend.override("torch"):
        want_g, want_s = tdo.gather_nd(x, i), tdo.scatter_nd(x, i, u, reduction)
    for threads in THREADS + (1000,):
        num_threads(threads)
        bits_equal(tdo.gather_nd(x, i), want_g, f"gather, {threads} threads")
        bits_equal(tdo.scatter_nd(x, i, u, reduction), want_s, f"scatter, {threads} threads")


@over_backends("", [()], only=("native",))
def test_gather_same_result_on_any_thread_count(any_backend, num_threads):
    """Above the grain: elements, rows, batch dims; against the portable path."""
    cpp_covers(any_backend, "gather_nd")
    x = make_data((256, 256), torch.float32)
    i = make_indices((100000,), (256, 256), torch.int64, negative=True)
    i1 = make_indices((70000,), (256,), torch.int32, negative=True)
    xb = make_data((4, 300, 50), torch.int16)
    ib = make_indices((4, 40000), (300,), torch.uint32)
    calls = [lambda: tdo.gather_nd(x, i), lambda: tdo.gather_nd(x, i1),
             lambda: tdo.gather_nd(xb, ib, 1)]
    with tdo._backend.override("torch"):
        wants = [fn() for fn in calls]
    for threads in THREADS:
        num_threads(threads)
        for fn, want in zip(calls, wants):
            bits_equal(fn(), want, f"{threads} threads")


@over_backends("reduction,dtype", [(r, d) for r in REDUCTIONS
                                   for d in (torch.float32, torch.int64, torch.uint8)],
               only=("native",))
def test_scatter_same_result_on_any_thread_count(any_backend, num_threads, deterministic,
                                                 reduction, dtype):
    """Above the grain, many duplicates: identical to the portable path on 1, 2, 4 threads."""
    cpp_covers(any_backend, "scatter_nd")
    x = make_data((512, 64), dtype)
    i = make_indices((60000,), (512, 64), torch.int64, negative=True)
    u = make_updates(x, i)
    i1 = make_indices((3000,), (512,), torch.int32)
    u1 = make_updates(x, i1)
    calls = [lambda: tdo.scatter_nd(x, i, u, reduction), lambda: tdo.scatter_nd(x, i1, u1, reduction)]
    with tdo._backend.override("torch"):
        wants = [fn() for fn in calls]
    for threads in THREADS:
        num_threads(threads)
        for fn, want in zip(calls, wants):
            bits_equal(fn(), want, f"{threads} threads")
