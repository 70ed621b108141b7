"""The Triton backend against the portable path on zero-size tensors, out-of-range indices that
overflow a linearized row or address empty slices, uint64 data, and rows too long for the top-k
kernel's composite key.

Each case runs under ``TORCH_DML_OPS_BACKEND=torch`` and ``=triton`` (the interpreter on CPU,
or CUDA): both must return bit-identical results (shape and dtype included) or raise the same
exception with the same message, and a failing call must leave the caller's tensors unchanged.
"""
import pytest
import torch

import torch_dml_ops as tdo
from conftest import TRITON_DEVICE
from reference import to_bits

pytestmark = pytest.mark.triton
DEV = TRITON_DEVICE
U64 = 2**64


@pytest.fixture
def launches(monkeypatch):
    """Counts the Triton launcher calls, per launcher."""
    import torch_dml_ops.triton_kernels as tk
    calls = []
    for name in ("gather_nd_triton", "scatter_nd_check_triton", "scatter_nd_triton",
                 "top_k1_triton"):
        real = getattr(tk, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)
        monkeypatch.setattr(tk, name, spy)
    return calls


def _outcome(fn):
    try:
        return "ok", fn()
    except Exception as e:      # compared across backends below
        return "raise", e


def _same(a, b, what):
    if isinstance(a, tuple):
        for x, y in zip(a, b):
            _same(x, y, what)
        return
    assert tuple(a.shape) == tuple(b.shape), f"{what}: shapes {tuple(a.shape)} vs {tuple(b.shape)}"
    assert a.dtype == b.dtype, f"{what}: dtypes {a.dtype} vs {b.dtype}"
    assert to_bits(a).tolist() == to_bits(b).tolist(), f"{what}: values differ"


@pytest.fixture
def both(backend, launches):
    """both(fn, kernel=None): fn() under the portable path and under Triton; the outcomes (the
    result's bits, or the exception's type and message) must be identical.  ``kernel``: whether
    a Triton launcher must (True) or must not (False) have run; None: not checked."""
    def run(fn, kernel=None):
        backend("torch")
        want = _outcome(fn)
        launches.clear()
        backend("triton")
        got = _outcome(fn)
        if kernel is not None:
            assert bool(launches) == kernel, f"Triton launchers run: {launches}"
        assert got[0] == want[0], f"triton {got[0]}s ({got[1]!r}), portable {want[0]}s ({want[1]!r})"
        if want[0] == "raise":
            assert type(got[1]) is type(want[1]) and str(got[1]) == str(want[1])
        else:
            _same(got[1], want[1], "triton vs portable")
        return got
    return run


def idx(values, dtype, shape):
    """Indices of ``dtype`` from Python ints (uint64 values >= 2**63 through int64)."""
    if dtype == torch.uint64:
        t = torch.tensor([v - U64 if v >= 2**63 else v for v in values], dtype=torch.int64)
        return t.view(torch.uint64).reshape(shape).to(DEV)
    return torch.tensor(values, dtype=torch.int64).to(dtype).reshape(shape).to(DEV)


INDEX_DTYPES = [torch.int64, torch.int32, torch.uint32, torch.uint64]

# ---------------------------------------------------------------------------------------------
# Zero-size tensors
# ---------------------------------------------------------------------------------------------

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
    return [(c, d) for c, v in cases.items() for d in INDEX_DTYPES
            if d in (torch.int64, torch.int32) or min(v[1], default=0) >= 0]


@pytest.mark.parametrize("case,index_dtype", _with_index_dtypes(GATHER_ZERO), ids=str)
def test_gather_nd_zero_size(both, case, index_dtype):
    shape, vals, ishape, b = GATHER_ZERO[case]
    x = torch.zeros(shape, device=DEV)
    i = idx(vals, index_dtype, ishape)
    both(lambda: tdo.gather_nd(x, i, b))
    out_shape = tuple(ishape[:-1]) + tuple(shape[b + ishape[-1]:])

    def into_out():
        out = torch.full(out_shape, 3.0, device=DEV)
        before = out.clone()
        try:
            tdo.gather_nd(x, i, b, out=out)
        except IndexError:
            assert torch.equal(out, before), "a failing gather wrote into out="
            raise
        return out
    both(into_out)


def test_gather_nd_zero_size_transposed_input(both):
    x = torch.zeros(4, 0, device=DEV).t()          # (0, 4), strides (1, 0)
    both(lambda: tdo.gather_nd(x, torch.tensor([[0]], device=DEV)))
    both(lambda: tdo.gather_nd(x, torch.zeros(0, 1, dtype=torch.int64, device=DEV)))
    y = torch.zeros(0, 3, device=DEV).t()          # (3, 0): empty slices
    both(lambda: tdo.gather_nd(y, torch.tensor([[2], [-3]], device=DEV)))
    both(lambda: tdo.gather_nd(y, torch.tensor([[3]], device=DEV)))


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
    "k0_refused": ((3, 4), [], (2, 0)),
}


@pytest.mark.parametrize("variant", ["functional", "out", "inplace"])
@pytest.mark.parametrize("reduction", ["none", "add", "max", "mul"])
@pytest.mark.parametrize("case,index_dtype", _with_index_dtypes(SCATTER_ZERO), ids=str)
def test_scatter_nd_zero_size(both, case, index_dtype, reduction, variant):
    shape, vals, ishape = SCATTER_ZERO[case]
    dtype = torch.int32                    # max has a Triton kernel for int32; mul does not
    x = torch.arange(int(torch.tensor(shape).prod()), dtype=dtype).reshape(shape).to(DEV)
    i = idx(vals, index_dtype, ishape)
    u = torch.ones(tuple(ishape[:-1]) + tuple(shape[ishape[-1]:]), dtype=dtype, device=DEV)

    def call():
        if variant == "functional":
            return tdo.scatter_nd(x, i, u, reduction)
        target = x.clone() if variant == "inplace" else torch.full(shape, 9, dtype=dtype,
                                                                      device=DEV)
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
    assert torch.equal(x, torch.arange(x.numel(), dtype=dtype).reshape(shape).to(DEV))


@pytest.mark.parametrize("shape,k,axis", [((0, 5), 2, -1), ((3, 0, 4), 1, 2), ((3, 0, 4), 4, 2),
                                          ((2, 3, 0), 2, 1), ((0, 5), 1, 0), ((3, 0), 1, 1),
                                          ((0,), 1, 0)])
@pytest.mark.parametrize("direction", ["decreasing", "increasing"])
def test_top_k1_zero_size(both, shape, k, axis, direction):
    for dtype in (torch.float32, torch.int8, torch.uint64):
        x = torch.zeros(shape, dtype=dtype, device=DEV)
        for index_dtype in (torch.int64, torch.uint32):
            both(lambda: tuple(tdo.top_k1(x, k, axis, direction, index_dtype)))


# ---------------------------------------------------------------------------------------------
# Out-of-range coordinates that overflow a linearized row: one message on every backend
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,bad,col", [(torch.int32, 2**30, 0), (torch.int32, -2**31, 0),
                                           (torch.int64, 2**62, 0), (torch.int64, -2**62, 0),
                                           (torch.int64, 2**63 - 1, 1), (torch.uint32, 2**32 - 1, 0),
                                           (torch.uint64, 2**63, 0), (torch.uint64, 2**62, 1)],
                         ids=str)
def test_overflowing_coordinate_same_error(both, dtype, bad, col):
    x = torch.arange(20., device=DEV).reshape(5, 4)
    vals = [0, 1] * 3000
    vals[2 * 1777 + col] = bad
    vals[2 * 2500] = 5                     # a later bad coordinate: the first one is named
    i = idx(vals, dtype, (3000, 2))
    both(lambda: tdo.gather_nd(x, i), kernel=True)
    both(lambda: tdo.scatter_nd(x, i, torch.zeros(3000, device=DEV)), kernel=True)
    both(lambda: tdo.scatter_nd(x, i, torch.zeros(3000, device=DEV), "add"))


# ---------------------------------------------------------------------------------------------
# uint64 data
# ---------------------------------------------------------------------------------------------

POOL = [0, 1, 7, 2**32 + 1, 2**62, 2**63 - 1, 2**63, 2**63 + 3, U64 - 2, U64 - 1]


def u64_data(shape, seed):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.tensor(shape).prod())
    vals = [POOL[int(v)] for v in torch.randint(0, len(POOL), (n,), generator=g)]
    return idx(vals, torch.uint64, shape)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
def test_gather_nd_uint64_data(both, index_dtype):
    x = u64_data((6, 5, 3), 1)
    i = idx([5, 4, 0, 0, 3, 2, 5, 4, 1, 1], index_dtype, (5, 2))
    both(lambda: tdo.gather_nd(x, i), kernel=True)
    both(lambda: tdo.gather_nd(x, idx([5, 4, 2, 0, 0, 0], index_dtype, (2, 3))), kernel=True)
    both(lambda: tdo.gather_nd(x.transpose(0, 1), idx([4, 5, 0, 1], index_dtype, (2, 2))),
         kernel=True)


@pytest.mark.parametrize("slice_len", [1, 3])
@pytest.mark.parametrize("reduction,kernel", [("none", True), ("add", True), ("mul", False),
                                              ("max", False), ("min", False)])
def test_scatter_nd_uint64_data(both, deterministic, reduction, kernel, slice_len):
    """none/add run in the kernel (bits, and wrapping adds on the int64 twin); mul/max/min
    need unsigned arithmetic or order and fall back to the portable path.  Deterministic mode:
    "none" keeps the last duplicate on both backends."""
    x = u64_data((6, slice_len), 2)
    i = idx([1, 4, 1, 0, 5, 4, 1], torch.int64, (7, 1))
    u = u64_data((7, slice_len), 3)
    both(lambda: tdo.scatter_nd(x, i, u, reduction), kernel=kernel)

    def inplace():
        y = x.clone()
        tdo.scatter_nd_(y, i, u, reduction)
        return y
    both(inplace, kernel=kernel)


def test_scatter_nd_uint64_add_wraps_in_the_kernel(both):
    x = idx([U64 - 1, 2**63], torch.uint64, (2,))
    u = idx([2, U64 - 1, 2**63], torch.uint64, (3,))
    got = both(lambda: tdo.scatter_nd(x, torch.tensor([[0], [1], [1]], device=DEV), u, "add"),
               kernel=True)[1]
    assert [v % U64 for v in got.cpu().view(torch.int64).tolist()] == [1, (2**63 + U64 - 1 + 2**63) % U64]


@pytest.mark.parametrize("direction", ["decreasing", "increasing"])
def test_top_k1_uint64_falls_back_to_the_portable_path(both, direction):
    import torch_dml_ops.triton_kernels as tk
    assert not tk.top_k1_triton_supports(torch.uint64, 3)
    x = u64_data((4, 37), 4)
    both(lambda: tuple(tdo.top_k1(x, 5, -1, direction)), kernel=False)
    both(lambda: tuple(tdo.top_k1(x, 4, 0, direction, torch.uint32)), kernel=False)


# ---------------------------------------------------------------------------------------------
# Rows too long for the composite key
# ---------------------------------------------------------------------------------------------

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
    assert "top_k1_triton" in launches
    assert torch.equal(i.cpu(), torch.topk(x.cpu(), 4, sorted=True).indices)
