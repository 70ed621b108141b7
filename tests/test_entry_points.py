"""The C++ kernels called directly, below the public functions: ``torch.ops.torch_dml_ops.<op>``
under ``torch_dml_ops._backend.override("native")``, with every kind of bad argument.

The reference is the public function on the portable path: for each rule the C++ entry point
must raise the same message, as the exception type a C++ kernel can raise (``ValueError`` where
the public function raises ConstraintError or ConstraintTypeError, ``IndexError`` for index
values and the axis, ``RuntimeError`` for memory overlap and storage), and the failing call must
modify nothing (values and version counters of every tensor it was given).  A call at a DirectML
feature level is checked by the op's Autograd kernel in Python before it reaches C++ (the C++
kernels keep the rules safety needs and ignore the level): where that check refuses it, the
exception is the public function's own.  The public function
never passes a non-canonical feature level; for those the portable kernel through ``torch.ops``
is the reference.

A few calls never reach the CPU kernel through ``torch.ops`` (meta tensors dispatch to the fake
kernel): those also call the C++ kernel itself (``torch.library.get_kernel(..., "CPU")``, what
``backend("native")`` registers).
"""
import pytest
import torch
from torch import _C

import torch_dml_ops as tdo
from torch_dml_ops import _backend

from conftest import NATIVE_OK, NATIVE_SKIP

pytestmark = [pytest.mark.skipif(not NATIVE_OK, reason=NATIVE_SKIP),
              pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")]

OPS = torch.ops.torch_dml_ops
CPU = _C.DispatchKeySet(_C.DispatchKey.CPU)
I64 = torch.int64
U64 = 2**64


@pytest.fixture(autouse=True)
def native(backend):
    backend("native")


# =============================================================================================
# Harness
# =============================================================================================

def cpp_type(e: BaseException) -> type:
    """The exception type a C++ kernel raises for the rule behind the public exception ``e``."""
    if isinstance(e, IndexError):          # index values; ConstraintIndexError (the axis)
        return IndexError
    if isinstance(e, RuntimeError):        # storage; MemoryOverlapError (a ValueError too)
        return RuntimeError
    if isinstance(e, ValueError):          # ConstraintError, ConstraintTypeError
        return ValueError
    return type(e)


def _memory(t: torch.Tensor) -> torch.Tensor:
    """A copy of every byte of t's storage (what any write through t could change, also
    outside t's own elements; an expanded tensor of 2**32 elements has a 1-element storage)."""
    return torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).clone()


def _snapshot(tensors):
    """(tensor, a copy of its storage's bytes, its version or None) of every dense CPU tensor."""
    state = []
    for t in tensors:
        if t.device.type == "meta" or t.layout != torch.strided:
            continue
        version = None if t.is_inference() else t._version
        state.append((t, _memory(t), version))
    return state


def _unchanged(state, when):
    for t, memory, version in state:
        assert torch.equal(_memory(t), memory), f"{when}: the failing call modified a tensor"
        if version is not None:
            assert t._version == version, f"{when}: the failing call bumped a version counter"


def same_error(case):
    """``case``: (public, entry, tensors) as the builders below return it.  ``public()`` runs
    on the portable path (the reference), ``entry()`` under native; both must fail, with the
    same message, ``entry`` with the C++ type of the public exception, and neither may modify
    ``tensors``.  Returns the message."""
    public, entry, tensors = case
    state = _snapshot(tensors)
    with tdo._backend.override("torch"):
        with pytest.raises(Exception) as want:
            public()
    _unchanged(state, "reference")
    with pytest.raises(Exception) as got:
        entry()
    _unchanged(state, "C++ entry point")
    # A call with a meta tensor dispatches to the fake kernel (Python), never to the CPU one.
    meta = any(t.device.type == "meta" for t in tensors)
    # At a level the Autograd kernel's Python checks refuse what they cover (ConstraintError,
    # ConstraintTypeError and ConstraintIndexError are ValueErrors); the rest is C++'s.
    python = getattr(entry, "level", "permissive") != "permissive" and isinstance(
        want.value, (ValueError, TypeError)) and not isinstance(want.value, RuntimeError)
    want_type = type(want.value) if meta or python else cpp_type(want.value)
    assert type(got.value) is want_type, \
        f"{type(got.value).__name__}: {got.value} (public: {type(want.value).__name__})"
    assert str(got.value) == str(want.value)
    return str(got.value)


def _level(level):
    return tdo.feature_level(None if level == "permissive" else level)


def gather(x, i, b=0, ci=None, cq=None, level="permissive", out=None, check=True):
    """gather_nd / gather_nd_out: the public call and the C++ entry point."""
    def public():
        with _level(level):
            return tdo.gather_nd(x, i, b, input_dimension_count=ci, indices_dimension_count=cq,
                                 check_indices=check, out=out)

    def entry():
        if out is None:
            return OPS.gather_nd.default(x, i, b, ci, cq, level, check)
        return OPS.gather_nd_out.default(x, i, b, ci, cq, level, check, out=out)
    entry.level = level
    return public, entry, [t for t in (x, i, out) if isinstance(t, torch.Tensor)]


def scatter(x, i, u, reduction="none", ci=None, cq=None, level="permissive", variant="functional",
            out=None, check=True):
    """scatter_nd / scatter_nd_out / scatter_nd_ (variant "inplace": x is the target; "out":
    into ``out``, by default a new tensor of x's shape and dtype filled with 7)."""
    args = (reduction, ci, cq, level, check, False)
    if variant == "out" and out is None:
        out = torch.full(tuple(x.shape), 7.)
        if x.layout == torch.strided and x.device.type == "cpu":
            out = out.to(x.dtype)

    def public():
        kw = dict(input_dimension_count=ci, indices_dimension_count=cq, check_indices=check)
        with _level(level):
            if variant == "inplace":
                return tdo.scatter_nd_(x, i, u, reduction, **kw)
            return tdo.scatter_nd(x, i, u, reduction, out=out, **kw)

    def entry():
        if variant == "inplace":
            return OPS.scatter_nd_.default(x, i, u, *args)
        if out is not None:
            return OPS.scatter_nd_out.default(x, i, u, *args, out=out)
        return OPS.scatter_nd.default(x, i, u, *args)
    entry.level = level
    return public, entry, [t for t in (x, i, u, out) if isinstance(t, torch.Tensor)]


def top_k1(x, k, axis=-1, direction="decreasing", index_dtype=torch.int64, level="permissive"):
    def public():
        with _level(level):
            return tdo.top_k1(x, k, axis, direction, index_dtype)

    def entry():
        return OPS.top_k1.default(x, k, axis, direction, index_dtype, level)
    entry.level = level
    return public, entry, [x]


def through_ops(op, *args, **kwargs):
    """A call the public functions never make (a non-canonical level, the backward op): the
    portable kernel through torch.ops is the reference."""
    fn = getattr(OPS, op).default
    tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
    return (lambda: fn(*args, **kwargs)), (lambda: fn(*args, **kwargs)), tensors


def f32(*shape):
    return torch.randn(shape)


def ix(values, dtype=I64):
    """Indices from nested Python ints (uint64 values >= 2**63 through int64 bits)."""
    if dtype == torch.uint64:
        flat = torch.tensor(values, dtype=torch.float64).shape        # the shape only
        vals = torch.tensor([v - U64 if v >= 2**63 else v for v in _flatten(values)], dtype=I64)
        return vals.view(torch.uint64).reshape(flat)
    return torch.tensor(values, dtype=I64).to(dtype)


def _flatten(v):
    if isinstance(v, (list, tuple)):
        return [x for item in v for x in _flatten(item)]
    return [v]


def freed(t):
    t.untyped_storage().resize_(0)
    return t


# =============================================================================================
# gather_nd
# =============================================================================================

GATHER_CASES = {
    # shapes, batch_dims, the index-tuple size
    "tuple_too_long": lambda: gather(f32(3, 4), torch.zeros(2, 3, dtype=I64)),
    "tuple_empty": lambda: gather(f32(3, 4), torch.zeros(2, 0, dtype=I64)),
    "indices_rank_0": lambda: gather(f32(3, 4), torch.tensor(1)),
    "input_rank_0": lambda: gather(torch.tensor(1.), torch.zeros(1, dtype=I64)),
    "batch_dim_differs": lambda: gather(f32(2, 4), torch.zeros(3, 1, dtype=I64), 1),
    "batch_dims_too_large": lambda: gather(f32(2, 4), torch.zeros(2, 1, dtype=I64), 2),
    "batch_dims_negative": lambda: gather(f32(2, 4), torch.zeros(2, 1, dtype=I64), -1),
    "batch_dims_plus_k_too_large": lambda: gather(f32(2, 4), torch.zeros(2, 2, dtype=I64), 1),
    # the DML form: both counts, equal ranks, counts in range, padding of size 1
    "dml_one_count": lambda: gather(f32(1, 3, 4), torch.zeros(1, 2, 1, dtype=I64), ci=2),
    "dml_other_count": lambda: gather(f32(1, 3, 4), torch.zeros(1, 2, 1, dtype=I64), cq=2),
    "dml_ranks_differ": lambda: gather(f32(1, 3, 4), torch.zeros(2, 1, dtype=I64), ci=2, cq=2),
    "dml_count_above_rank": lambda: gather(f32(1, 3, 4), torch.zeros(1, 2, 1, dtype=I64),
                                           ci=4, cq=2),
    "dml_count_zero": lambda: gather(f32(1, 3, 4), torch.zeros(1, 2, 1, dtype=I64), ci=2, cq=0),
    "dml_count_negative": lambda: gather(f32(1, 3, 4), torch.zeros(1, 2, 1, dtype=I64),
                                         ci=-1, cq=2),
    "dml_input_padding_not_1": lambda: gather(f32(2, 3, 4), torch.zeros(1, 2, 1, dtype=I64),
                                              ci=2, cq=2),
    "dml_indices_padding_not_1": lambda: gather(f32(1, 3, 4), torch.zeros(2, 2, 1, dtype=I64),
                                                ci=2, cq=2),
    "dml_output_too_many_dims": lambda: gather(f32(1, 3, 4), torch.zeros(2, 2, 1, dtype=I64),
                                               ci=3, cq=3),
    "dml_batch_dim_differs": lambda: gather(f32(1, 2, 3, 4), torch.zeros(1, 3, 5, 1, dtype=I64),
                                            1, ci=3, cq=3),
    # data and index dtypes
    "data_complex64": lambda: gather(f32(3, 4).to(torch.complex64), ix([[1]])),
    "data_complex128": lambda: gather(f32(3, 4).to(torch.complex128), ix([[1]])),
    "data_complex32": lambda: gather(f32(3, 4).to(torch.complex32), ix([[1]])),
    "data_float8": lambda: gather(f32(3, 4).to(torch.float8_e4m3fn), ix([[1]])),
    "index_int16": lambda: gather(f32(3, 4), ix([[1]], torch.int16)),
    "index_uint8": lambda: gather(f32(3, 4), ix([[1]], torch.uint8)),
    "index_uint16": lambda: gather(f32(3, 4), ix([[1]], torch.uint16)),
    "index_float": lambda: gather(f32(3, 4), torch.ones(1, 1)),
    "index_bool": lambda: gather(f32(3, 4), torch.ones(1, 1, dtype=torch.bool)),
    "index_complex": lambda: gather(f32(3, 4), torch.ones(1, 1, dtype=torch.complex64)),
    # feature levels
    "2_1_index_int64": lambda: gather(f32(1, 2, 3, 4), torch.zeros(1, 1, 1, 2, dtype=I64),
                                      ci=4, cq=1, level="2_1"),
    "2_1_index_int32": lambda: gather(f32(1, 2, 3, 4), torch.zeros(1, 1, 1, 2, dtype=torch.int32),
                                      ci=4, cq=1, level="2_1"),
    "2_1_index_uint64": lambda: gather(f32(1, 2, 3, 4),
                                       torch.zeros(1, 1, 1, 2, dtype=torch.uint64), ci=4, cq=1,
                                       level="2_1"),
    "2_1_data_float64": lambda: gather(f32(1, 2, 3, 4).double(),
                                       torch.zeros(1, 1, 1, 2, dtype=torch.uint32), ci=4, cq=1,
                                       level="2_1"),
    "2_1_data_bool": lambda: gather(torch.ones(1, 2, 3, 4, dtype=torch.bool),
                                    torch.zeros(1, 1, 1, 2, dtype=torch.uint32), ci=4, cq=1,
                                    level="2_1"),
    "2_1_data_bfloat16": lambda: gather(f32(3, 4).bfloat16(), ix([[1]], torch.uint32),
                                        level="2_1"),
    "2_1_dml_count_5": lambda: gather(f32(1, 1, 1, 1, 3), torch.zeros(1, 1, 1, 1, 1,
                                                                      dtype=torch.uint32),
                                      ci=1, cq=1, level="2_1"),
    "2_1_dml_count_3": lambda: gather(f32(1, 1, 3), torch.zeros(1, 1, 1, dtype=torch.uint32),
                                      ci=1, cq=1, level="2_1"),
    "2_1_natural_input_5_dims": lambda: gather(f32(2, 2, 2, 2, 2),
                                               torch.zeros(1, 1, dtype=torch.uint32),
                                               level="2_1"),
    "2_1_natural_output_5_dims": lambda: gather(f32(2, 2, 2, 2),
                                                torch.zeros(2, 2, 1, dtype=torch.uint32),
                                                level="2_1"),
    "2_1_natural_indices_5_dims": lambda: gather(f32(2), torch.zeros(1, 1, 1, 1, 1,
                                                                     dtype=torch.uint32),
                                                 level="2_1"),
    "2_1_batch_dims": lambda: gather(f32(2, 3, 4), torch.zeros(2, 5, 1, dtype=torch.uint32), 1,
                                     level="2_1"),
    "3_0_dml_count_9": lambda: gather(f32(*(1,) * 8 + (3,)), torch.zeros((1,) * 9,
                                                                          dtype=torch.uint32),
                                      ci=1, cq=1, level="3_0"),
    "3_0_natural_input_9_dims": lambda: gather(f32(*(2,) * 9), torch.zeros(1, 1, dtype=I64),
                                               level="3_0"),
    "3_1_dml_ranks_differ": lambda: gather(f32(1, 3, 4), torch.zeros(2, 1, dtype=I64), ci=2,
                                          cq=2, level="3_1"),
    # out=
    "out_shape": lambda: gather(f32(4, 5), ix([[0], [1]]), out=torch.full((3, 5), 7.)),
    "out_dtype": lambda: gather(f32(4, 5), ix([[0], [1]]),
                                out=torch.full((2, 5), 7., dtype=torch.float64)),
    "out_shape_and_dtype": lambda: gather(f32(4, 5), ix([[0], [1]]),
                                          out=torch.full((3, 5), 7., dtype=torch.float64)),
    "out_overlaps_input": lambda: _gather_out_overlaps_input(),
    "out_overlaps_indices": lambda: _gather_out_overlaps_indices(),
    "out_internal_overlap": lambda: gather(f32(4, 5), ix([[0], [1]]),
                                           out=torch.full((1, 5), 7.).expand(2, 5)),
    "out_internal_overlap_strided": lambda: gather(f32(4, 4, 4), ix([[1, 2]]).expand(4, 2),
                                                   out=torch.zeros(32).as_strided((4, 4), (1, 1))),
    "out_inference_tensor": lambda: _gather_out_inference(),
    "out_on_meta": lambda: gather(f32(4, 5), ix([[0], [1]]),
                                  out=torch.empty(2, 5, device="meta")),
    # devices and layouts
    "indices_on_meta": lambda: gather(f32(4, 5), ix([[0]]).to("meta")),
    "input_on_meta": lambda: gather(f32(4, 5).to("meta"), ix([[0]])),
    # index values: named by value and position
    "index_too_large": lambda: gather(f32(4, 5, 6), ix([[[0, 1], [3, 4]], [[2, 5], [1, 1]]])),
    "index_below_minus_size": lambda: gather(f32(4, 5), ix([[0], [-5]])),
    "index_int32_high": lambda: gather(f32(4, 5), ix([[0], [2**31 - 1]], torch.int32)),
    "index_int32_low": lambda: gather(f32(4, 5), ix([[-2**31], [0]], torch.int32)),
    "index_int64_extreme": lambda: gather(f32(4, 5), ix([[0], [-2**63]])),
    "index_uint32": lambda: gather(f32(4, 5), ix([[0], [4]], torch.uint32)),
    "index_uint32_max": lambda: gather(f32(4, 5), ix([[2**32 - 1], [4]], torch.uint32)),
    "index_uint64_2_63": lambda: gather(f32(4, 5), ix([[1], [2**63]], torch.uint64)),
    "index_uint64_max": lambda: gather(f32(4, 5), ix([[U64 - 1], [1]], torch.uint64)),
    "index_column_1": lambda: gather(f32(4, 5, 6), ix([[0, 1], [1, 5], [9, 9]])),
    "index_element_gather": lambda: gather(f32(4, 5), ix([[0, 1], [3, -6]])),
    "index_overflowing_row": lambda: gather(f32(5, 4), ix([[0, 1]] * 3000 + [[2**30, 1]],
                                                          torch.int32)),
    "index_batch_position": lambda: gather(f32(2, 5, 3), ix([[[1], [2]], [[4], [-6]]]), 1),
    "index_dml_position": lambda: gather(f32(1, 4, 3), ix([[[1], [4]]]), ci=2, cq=2),
    "index_into_empty_slices": lambda: gather(f32(4, 0), ix([[7]])),
    "index_into_empty_dimension": lambda: gather(f32(3, 0, 2), torch.zeros(4, 2, dtype=I64)),
    "index_out_untouched": lambda: gather(f32(4, 5), ix([[0], [9]]), out=torch.full((2, 5), 7.)),
    "index_strided_out_untouched": lambda: gather(
        f32(4, 5), ix([[0], [9]]), out=torch.full((5, 2), 7.).t()),
    # storage resized away
    "input_storage_freed": lambda: gather(freed(f32(4, 3)), ix([[1]])),
    "indices_storage_freed": lambda: gather(f32(4, 3), freed(ix([[1]]))),
    "out_storage_freed": lambda: gather(f32(4, 3), ix([[1]]), out=freed(torch.ones(1, 3))),
    "input_storage_shrunk_with_offset": lambda: _shrunk_view_gather(),
}


def _gather_out_overlaps_input():
    x = f32(4, 5)
    return gather(x, ix([[0], [1]]), out=x[2:])


def _gather_out_overlaps_indices():
    base = torch.zeros(8, dtype=I64)
    return gather(torch.arange(8).reshape(4, 2), base[:2].view(2, 1), out=base[1:5].view(2, 2))


def _gather_out_inference():
    with torch.inference_mode():
        out = torch.full((2, 5), 7.)
    return gather(f32(4, 5), ix([[0], [1]]), out=out)


def _shrunk_view_gather():
    base = torch.arange(40, dtype=torch.float64).reshape(10, 4)
    x = base[2:]                                  # storage offset 8 elements
    base.untyped_storage().resize_(39 * 8)
    return gather(x, ix([[0], [5]]))


@pytest.mark.parametrize("case", sorted(GATHER_CASES))
def test_gather_nd_entry_point_raises_like_the_public_function(case):
    same_error(GATHER_CASES[case]())


# Feature-level arguments the public functions never pass (they canonicalize).
NON_CANONICAL = ["2.1", "DML_FEATURE_LEVEL_2_1", "FEATURE_LEVEL_3_0", "", "default",
                 "PERMISSIVE", " 2_1", "3_2", "4_0"]


@pytest.mark.parametrize("level", NON_CANONICAL)
def test_non_canonical_feature_level_raises_like_the_portable_kernel(level):
    x, i, u = f32(4, 3), ix([[1]]), f32(1, 3)
    for case in (through_ops("gather_nd", x, i, 0, None, None, level, True),
                 through_ops("gather_nd_out", x, i, 0, None, None, level, True,
                             out=torch.zeros(1, 3)),
                 through_ops("scatter_nd", x, i, u, "none", None, None, level, True, False),
                 through_ops("scatter_nd_out", x, i, u, "none", None, None, level, True, False,
                             out=torch.zeros(4, 3)),
                 through_ops("scatter_nd_", x, i, u, "none", None, None, level, True, False),
                 through_ops("top_k1", x, 1, -1, "decreasing", None, level)):
        msg = same_error(case)
        assert f"feature_level argument {level!r} is not a canonical feature level" in msg


def test_cpp_kernels_leave_the_levels_to_python():
    """The C++ kernels keep the rules safety needs and ignore feature_level: the levels' limits
    are checked once, in Python, by the Autograd kernel a torch.ops call from Python passes
    through.  Under inference mode (no Autograd kernel) or from C++, a call at a level runs as
    at the permissive default, and is still refused where it would be unsafe."""
    x, i, u = f32(4, 3), ix([[1], [-1]]), f32(2, 3)      # int64 indices: refused at 2_1
    calls = {"gather_nd": lambda lvl: OPS.gather_nd.default(x, i, 0, None, None, lvl, True),
             "scatter_nd": lambda lvl: OPS.scatter_nd.default(x, i, u, "add", None, None, lvl,
                                                              True, False),
             "top_k1": lambda lvl: OPS.top_k1.default(x, 2, -1, "decreasing", None, lvl)}
    for name, call in calls.items():
        with pytest.raises(tdo.ConstraintError, match="DML_FEATURE_LEVEL_2_1"):
            call("2_1")
        with torch.inference_mode():
            got, want = call("2_1"), call("permissive")
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            assert torch.equal(g, w), name
    with torch.inference_mode(), pytest.raises(IndexError, match="value 4 at position"):
        OPS.gather_nd.default(x, ix([[4]]), 0, None, None, "2_1", True)


@pytest.mark.parametrize("case", ["too_large", "negative", "uint32", "uint64", "batch"])
def test_gather_nd_backward_entry_point_checks_indices(case):
    """The backward op is public too (called with indices the forward accepted, but any caller
    can pass others)."""
    grad = torch.ones(2, 5)
    i = {"too_large": ix([[0], [4]]), "negative": ix([[0], [-5]]),
         "uint32": ix([[4], [0]], torch.uint32), "uint64": ix([[0], [2**63 + 1]], torch.uint64),
         "batch": ix([[[1]], [[7]]])}[case]
    b = 1 if case == "batch" else 0
    shape = [4]                                   # index_sizes: the indexed dim's size
    if case == "batch":
        grad = torch.ones(2, 1, 5)
    msg = same_error(through_ops("gather_nd_backward", grad, i, shape, b, None, None))
    assert msg.startswith("gather_nd_backward: IndicesTensor value ")
    assert "out of range for index_sizes[0] of size 4" in msg


BACKWARD_BAD_CALLS = {
    # (grad shape, indices, index_sizes, batch_dims, input_dimension_count, indices_dim_count)
    "sizes-too-few": ((2, 5), [[0], [1]], [], 0, None, None),
    "sizes-too-many": ((2, 5), [[0], [1]], [4, 5], 0, None, None),
    "size-negative": ((2, 5), [[0], [1]], [-4], 0, None, None),
    "grad-leading": ((3, 5), [[0], [1]], [4], 0, None, None),
    "grad-rank": ((), [[0], [1]], [4], 0, None, None),
    "grad-batch": ((3, 1, 5), [[[0]], [[1]]], [4], 1, None, None),
    "batch-dims": ((2, 5), [[0], [1]], [4], 2, None, None),
    "indices-rank": ((2, 5), 7, [4], 0, None, None),
    "dml-one-count": ((1, 2, 5), [[[0], [1]]], [4], 0, 2, None),
    "dml-input-count": ((1, 2, 5), [[[0], [1]]], [4], 0, 4, 2),
    "dml-indices-count": ((1, 2, 5), [[[0], [1]]], [4], 0, 2, 0),
    "dml-k-too-large": ((1, 2, 5), [[[0, 0], [1, 1]]], [4, 4], 0, 1, 2),
    "dml-grad-padding": ((3, 2, 5), [[[0], [1]]], [4], 0, 2, 2),
    "dml-grad-short": ((5,), [[[0], [1]]], [4], 0, 2, 2),
}


@pytest.mark.parametrize("case", list(BACKWARD_BAD_CALLS))
def test_gather_nd_backward_checks_its_shapes(case):
    """gather_nd_backward takes the k indexed sizes and derives the rest of the input's shape
    from grad (so that it shards): a call whose grad, indices and index_sizes do not describe a
    gather raises the same ValueError from the C++ kernel as from the portable one."""
    g, i, sizes, b, cin, cidx = BACKWARD_BAD_CALLS[case]
    msg = same_error(through_ops("gather_nd_backward", torch.ones(g), torch.tensor(i), sizes, b,
                                 cin, cidx))
    want = {"sizes-too-few": "index_sizes must hold the k = 1 indexed input sizes",
            "sizes-too-many": "index_sizes must hold the k = 1 indexed input sizes",
            "size-negative": "each >= 0, got [-4]",
            "grad-leading": "grad has shape (3, 5), which is not a gather_nd output",
            "grad-rank": "grad has shape (), which is not a gather_nd output",
            "grad-batch": "grad has shape (3, 1, 5), which is not a gather_nd output",
            "batch-dims": "batch_dims (BatchDimensionCount) must be in [0, IndicesTensor rank 2)",
            "indices-rank": "IndicesTensor must have at least 1 dimension",
            "dml-one-count": "the DML form needs both",
            "dml-input-count": "input_dimension_count must be in [1, InputTensor.DimensionCount",
            "dml-indices-count": "indices_dimension_count must be in [1,",
            "dml-k-too-large": "index-tuple size and must be in [1, 1]",
            "dml-grad-padding": "grad has shape (3, 2, 5), expected (1, 2, 5)",
            "dml-grad-short": "grad has shape (5,), which is not a gather_nd output"}[case]
    assert want in msg, msg


@pytest.mark.parametrize("case", ["index-too-large", "index-too-small", "sizes-overflow"])
def test_gather_nd_backward_messages_name_the_op_and_index_sizes(case):
    """Through torch.ops, gather_nd_backward's errors name it and the argument the size came
    from (issue 19: a bad index named gather_nd and "InputTensor dimension 0", and index_sizes
    of 2**62 surfaced as the stable ABI's "torch_call_dispatcher(aten::new_empty) API call
    failed"), the same from the C++ and the portable kernel."""
    g = torch.ones(2, 3)
    i, sizes = {"index-too-large": ([[1], [5]], [4]), "index-too-small": ([[-9], [0]], [4]),
                "sizes-overflow": ([[1], [0]], [2**62])}[case]
    msg = same_error(through_ops("gather_nd_backward", g, torch.tensor(i), sizes, 0, None, None))
    want = {"index-too-large": "gather_nd_backward: IndicesTensor value 5 at position (1, 0) is "
                               "out of range for index_sizes[0] of size 4; valid range [-4, 3]",
            "index-too-small": "gather_nd_backward: IndicesTensor value -9 at position (0, 0) "
                               "is out of range for index_sizes[0] of size 4",
            "sizes-overflow": "gather_nd_backward: index_sizes [4611686018427387904] with "
                              "grad's shape (2, 3) describe an input gradient of shape "
                              "(4611686018427387904, 3), more than 2**63 - 1 elements"}[case]
    assert want in msg, msg


def test_gather_nd_backward_allocation_failure_names_the_op():
    """A gradient too large to allocate: a RuntimeError that names the op and the shape (the
    C++ kernel; the portable one adds torch's allocator message)."""
    for name in ("native", "torch"):
        with tdo._backend.override(name), pytest.raises(RuntimeError) as e:
            OPS.gather_nd_backward(torch.ones(2, 3), torch.tensor([[0], [1]]), [2**50], 0,
                                   None, None)
        assert str(e.value).startswith("gather_nd_backward: cannot allocate the input gradient "
                                       "of shape (1125899906842624, 3) and dtype torch.float32"), \
            (name, str(e.value))


# =============================================================================================
# scatter_nd, scatter_nd_out, scatter_nd_
# =============================================================================================

def _sc(x_shape, i, u_shape, **kw):
    return scatter(f32(*x_shape), i, f32(*u_shape), **kw)


SCATTER_CASES = {
    "updates_shape": lambda v: _sc((4, 3), ix([[1], [2]]), (2, 2), variant=v),
    "updates_shape_elements": lambda v: _sc((4, 3), ix([[1, 2]]), (1, 3), variant=v),
    "updates_dtype": lambda v: scatter(f32(4), ix([[1]]), torch.ones(1, dtype=torch.float64),
                                       variant=v),
    "tuple_too_long": lambda v: _sc((4, 3), torch.zeros(2, 3, dtype=I64), (2,), variant=v),
    "tuple_empty_updates_shape": lambda v: _sc((4, 3), torch.zeros(2, 0, dtype=I64), (2, 3),
                                               variant=v),
    "tuple_empty_dml_updates_rank": lambda v: _sc((1, 4, 3), torch.zeros(1, 2, 0, dtype=I64),
                                                  (1, 2, 4, 3), ci=2, cq=2, variant=v),
    "tuple_empty_dml_too_many_dims": lambda v: _sc((1, 4, 3), torch.zeros(2, 2, 0, dtype=I64),
                                                   (2, 2, 4, 3), ci=2, cq=3, variant=v),
    "input_rank_0": lambda v: scatter(torch.tensor(1.), torch.zeros(1, dtype=I64),
                                      torch.tensor(1.), variant=v),
    "reduction_sum": lambda v: _sc((4, 3), ix([[1]]), (1, 3), reduction="sum", variant=v),
    "reduction_upper_case": lambda v: _sc((4, 3), ix([[1]]), (1, 3), reduction="ADD", variant=v),
    "reduction_empty": lambda v: _sc((4, 3), ix([[1]]), (1, 3), reduction="", variant=v),
    "dml_one_count": lambda v: _sc((1, 4, 3), ix([[[1]]]), (1, 1, 3), ci=2, variant=v),
    "dml_updates_rank": lambda v: _sc((1, 4, 3), ix([[[1], [2]]]), (2, 3), ci=2, cq=2,
                                      variant=v),
    "dml_updates_shape": lambda v: _sc((1, 4, 3), ix([[[1], [2]]]), (2, 1, 3), ci=2, cq=2,
                                       variant=v),
    "dml_input_padding_not_1": lambda v: _sc((2, 4, 3), ix([[[1], [2]]]), (1, 2, 3), ci=2,
                                             cq=2, variant=v),
    "dml_indices_padding_not_1": lambda v: scatter(f32(1, 4, 3), torch.zeros(2, 2, 1, dtype=I64),
                                                   f32(2, 2, 3), ci=2, cq=2, variant=v),
    "dml_count_above_rank": lambda v: _sc((1, 4, 3), ix([[[1]]]), (1, 1, 3), ci=4, cq=2,
                                          variant=v),
    "data_complex64": lambda v: scatter(f32(4).to(torch.complex64), ix([[1]]),
                                        f32(1).to(torch.complex64), variant=v),
    "data_float8": lambda v: scatter(f32(4).to(torch.float8_e5m2), ix([[1]]),
                                     f32(1).to(torch.float8_e5m2), variant=v),
    "index_int16": lambda v: _sc((4, 3), ix([[1]], torch.int16), (1, 3), variant=v),
    "index_float": lambda v: _sc((4, 3), torch.ones(1, 1), (1, 3), variant=v),
    "2_1_index_int64": lambda v: scatter(f32(1, 1, 3, 2), ix([[[[2], [0]]]]), f32(1, 1, 2, 2),
                                         ci=2, cq=2, level="2_1", variant=v),
    "2_1_data_float64": lambda v: scatter(f32(1, 1, 3, 2).double(),
                                          ix([[[[2], [0]]]], torch.uint32),
                                          f32(1, 1, 2, 2).double(), ci=2, cq=2, level="2_1",
                                          variant=v),
    "2_1_dml_count_8": lambda v: scatter(f32(*(1,) * 6 + (3, 2)),
                                         ix([[2], [0]], torch.uint32).reshape((1,) * 6 + (2, 1)),
                                         f32(*(1,) * 6 + (2, 2)), ci=2, cq=2, level="2_1",
                                         variant=v),
    "2_1_natural_5_dims": lambda v: scatter(f32(2, 2, 2, 2, 2), ix([[1]], torch.uint32),
                                            f32(1, 2, 2, 2, 2), level="2_1", variant=v),
    "3_1_dml_count_9": lambda v: scatter(f32(*(1,) * 7 + (3, 2)),
                                         ix([[2], [0]], torch.uint32).reshape((1,) * 7 + (2, 1)),
                                         f32(*(1,) * 7 + (2, 2)), ci=2, cq=2, level="3_1",
                                         variant=v),
    "3_0_reduction_add": lambda v: _sc((4, 3), ix([[1]]), (1, 3), reduction="add",
                                       level="3_0", variant=v),
    "3_1_reduction_max": lambda v: _sc((4, 3), ix([[1]]), (1, 3), reduction="max",
                                       level="3_1", variant=v),
    # devices and layouts
    "updates_on_meta": lambda v: scatter(f32(4, 3), ix([[1]]), f32(1, 3).to("meta"), variant=v),
    "indices_on_meta": lambda v: scatter(f32(4, 3), ix([[1]]).to("meta"), f32(1, 3), variant=v),
    # index values
    "index_too_large": lambda v: _sc((4, 5, 3), ix([[0, 1], [3, 4], [2, 5], [1, 1]]), (4, 3),
                                     variant=v),
    "index_below_minus_size": lambda v: scatter(torch.zeros(4), ix([[-5]]), torch.ones(1),
                                                variant=v),
    "index_uint32": lambda v: _sc((4, 3), ix([[1], [4]], torch.uint32), (2, 3), variant=v),
    "index_uint64_2_63": lambda v: _sc((4, 3), ix([[1], [2**63 + 1]], torch.uint64), (2, 3),
                                       variant=v),
    "index_uint64_2_63_add": lambda v: _sc((4, 3), ix([[2**63], [1]], torch.uint64), (2, 3),
                                           reduction="add", variant=v),
    "index_int64_extreme_max": lambda v: _sc((4, 3), ix([[1], [-2**63]]), (2, 3),
                                             reduction="max", variant=v),
    "index_int32_overflowing_row": lambda v: _sc((5, 4), ix([[0, 1]] * 3000 + [[2**30, 1]],
                                                            torch.int32), (3001,), variant=v),
    "index_into_empty_slices": lambda v: scatter(f32(4, 0), ix([[7]]), f32(1, 0), variant=v),
    "index_dml_position": lambda v: _sc((1, 4, 3), ix([[[1], [4]]]), (1, 2, 3), ci=2, cq=2,
                                        variant=v),
    # storage resized away
    "input_storage_freed": lambda v: scatter(freed(f32(4, 3)), ix([[1]]), f32(1, 3), variant=v),
    "indices_storage_freed": lambda v: scatter(f32(4, 3), freed(ix([[1]])), f32(1, 3), variant=v),
    "updates_storage_freed": lambda v: scatter(f32(4, 3), ix([[1]]), freed(f32(1, 3)), variant=v),
    "updates_storage_freed_half_add": lambda v: scatter(
        f32(4, 3).half(), ix([[1]]), freed(f32(1, 3).half()), reduction="add", variant=v),
}

# What only the out= variant, or only the in-place one, has.
OUT_CASES = {
    "out_shape": lambda: scatter(f32(4, 3), ix([[1]]), f32(1, 3), out=torch.full((3, 3), 7.)),
    "out_dtype": lambda: scatter(f32(4, 3), ix([[1]]), f32(1, 3),
                                 out=torch.full((4, 3), 7., dtype=torch.float64)),
    "out_overlaps_input": lambda: _scatter_out_overlaps("input"),
    "out_is_input": lambda: _scatter_out_overlaps("same"),
    "out_overlaps_updates": lambda: _scatter_out_overlaps("updates"),
    "out_overlaps_indices": lambda: _scatter_out_overlaps("indices"),
    "out_internal_overlap": lambda: scatter(f32(4, 4), ix([[1, 2]]), torch.tensor([5.]),
                                            out=torch.zeros(1, 4).expand(4, 4)),
    "out_internal_overlap_strided": lambda: scatter(f32(4, 4), ix([[1, 2]]), torch.tensor([5.]),
                                                    out=torch.zeros(32).as_strided((4, 4), (2, 1))),
    "out_inference_tensor": lambda: _scatter_out_inference(),
    "out_on_meta": lambda: scatter(f32(4, 3), ix([[1]]), f32(1, 3),
                                   out=torch.empty(4, 3, device="meta")),
    "out_storage_freed": lambda: scatter(f32(4, 3), ix([[1]]), f32(1, 3),
                                         out=freed(torch.ones(4, 3))),
    "out_index_error_untouched": lambda: scatter(f32(4, 3), ix([[1], [4]]), f32(2, 3), "add",
                                                 out=torch.full((3, 4), 7.).t()),
}

INPLACE_CASES = {
    "target_overlaps_updates": lambda: _inplace_overlaps("updates"),
    "target_is_updates": lambda: _inplace_overlaps("same"),
    "target_overlaps_indices": lambda: _inplace_overlaps("indices"),
    "target_internal_overlap": lambda: scatter(torch.zeros(1, 4).expand(4, 4), ix([[1, 2]]),
                                               torch.tensor([5.]), variant="inplace"),
    "target_internal_overlap_strided": lambda: scatter(
        torch.zeros(32).as_strided((4, 4), (1, 1)), ix([[1, 2]]), torch.tensor([5.]),
        variant="inplace"),
    "target_inference_tensor": lambda: _inplace_inference(),
    "target_on_meta": lambda: scatter(f32(4, 3).to("meta"), ix([[1]]), f32(1, 3),
                                      variant="inplace"),
    "target_index_error_untouched_strided": lambda: scatter(
        torch.full((3, 4), 7.).t(), ix([[1], [-5]]), f32(2, 3), "max", variant="inplace"),
}


def _scatter_out_overlaps(what):
    x, i, u = f32(4, 3), ix([[1]]), f32(1, 3)
    if what == "input":
        return scatter(x, i, u, out=x.view(12)[:12].view(4, 3))
    if what == "same":
        return scatter(x, i, u, out=x)
    if what == "updates":
        big = f32(5, 3)
        return scatter(x, i, big[3:4], out=big[:4])          # row 3 of out is the updates
    base = torch.zeros(16, dtype=I64)         # int64 data, the indices inside the out= buffer
    return scatter(torch.arange(12).reshape(4, 3), base[5:6].view(1, 1),
                   torch.ones(1, 3, dtype=I64), out=base[:12].view(4, 3))


def _scatter_out_inference():
    with torch.inference_mode():
        out = torch.full((4, 3), 7.)
    return scatter(f32(4, 3), ix([[1]]), f32(1, 3), out=out)


def _inplace_overlaps(what):
    if what == "updates":
        big = f32(5, 3)
        return scatter(big[:4], ix([[1]]), big[3:4], variant="inplace")  # the target's row 3
    if what == "same":
        x = f32(4)
        return scatter(x, ix([[1]]), x[:1], variant="inplace")
    base = torch.zeros(8, dtype=I64)          # the indices inside the target
    return scatter(base[:4], base[2:3].view(1, 1), torch.ones(1, dtype=I64), variant="inplace")


def _inplace_inference():
    with torch.inference_mode():
        target = torch.full((4, 3), 7.)
    return scatter(target, ix([[1]]), f32(1, 3), variant="inplace")


@pytest.mark.parametrize("variant", ["functional", "out", "inplace"])
@pytest.mark.parametrize("case", sorted(SCATTER_CASES))
def test_scatter_nd_entry_points_raise_like_the_public_function(case, variant):
    msg = same_error(SCATTER_CASES[case](variant))
    if variant == "inplace":
        assert msg.startswith("scatter_nd_:"), msg


def test_scatter_nd_tuple_size_rule_messages():
    """ONNX ScatterND's k: 0 to the input's rank (GatherND's starts at 1); the C++ message is
    the Python one."""
    msg = same_error(SCATTER_CASES["tuple_too_long"]("functional"))
    assert "index-tuple size and must be in [0, 2]" in msg and "got 3" in msg, msg
    msg = same_error(SCATTER_CASES["tuple_empty_updates_shape"]("functional"))
    assert "UpdatesTensor must have sizes (2, 4, 3)" in msg, msg
    msg = same_error(SCATTER_CASES["tuple_empty_dml_too_many_dims"]("functional"))
    assert "UpdatesTensor needs 4 dimensions (2, 2, 4, 3), more than the DimensionCount 3" in msg
    msg = same_error(gather(f32(4, 3), torch.zeros(2, 0, dtype=I64)))
    assert "index-tuple size and must be in [1, 2]" in msg and "got 0" in msg, msg


@pytest.mark.parametrize("variant", ["functional", "out", "inplace"])
def test_scatter_nd_tuple_size_0_entry_points_match_the_public_function(variant):
    """k = 0 through the C++ entry points: every update covers the whole input, in index
    order, as the public function on the portable path computes it."""
    x = f32(4, 3)
    i = torch.zeros(3, 0, dtype=I64)
    u = torch.arange(36.).reshape(3, 4, 3) - 17
    for reduction in ("none", "add", "mul", "max", "min"):
        with tdo._backend.override("torch"):
            want = tdo.scatter_nd(x, i, u, reduction)
        args = (reduction, None, None, "permissive", True, False)
        if variant == "functional":
            got = OPS.scatter_nd.default(x, i, u, *args)
        elif variant == "out":
            got = torch.full((4, 3), 7.)
            OPS.scatter_nd_out.default(x, i, u, *args, out=got)
        else:
            got = x.clone()
            OPS.scatter_nd_.default(got, i, u, *args)
        assert torch.equal(got, want), reduction


@pytest.mark.parametrize("case", sorted(OUT_CASES))
def test_scatter_nd_out_entry_point_raises_like_the_public_function(case):
    same_error(OUT_CASES[case]())


@pytest.mark.parametrize("case", sorted(INPLACE_CASES))
def test_scatter_nd_inplace_entry_point_raises_like_the_public_function(case):
    msg = same_error(INPLACE_CASES[case]())
    assert msg.startswith("scatter_nd_:"), msg


def test_unchecked_entry_points_skip_like_the_public_function():
    """check_indices=False through the C++ entry points: the out-of-range tuples give zero
    slices (gather) or are skipped (scatter), as in the public functions on the portable path,
    for the functional, out= and in-place ops."""
    x = f32(4, 3)
    i = ix([[1], [9], [-5], [2], [-1]])
    u = f32(5, 3) + 10
    with tdo._backend.override("torch"):
        want = tdo.gather_nd(x, i, check_indices=False)
    assert torch.equal(want[1], torch.zeros(3)) and torch.equal(want[2], torch.zeros(3))
    assert torch.equal(OPS.gather_nd.default(x, i, 0, None, None, "permissive", False), want)
    out = torch.full((5, 3), 7.)
    OPS.gather_nd_out.default(x, i, 0, None, None, "permissive", False, out=out)
    assert torch.equal(out, want)
    for reduction in ("none", "add", "mul", "max"):
        with tdo._backend.override("torch"):
            want = tdo.scatter_nd(x, i, u, reduction, check_indices=False)
        assert torch.equal(want, tdo.scatter_nd(x, i[[0, 3, 4]], u[[0, 3, 4]], reduction))
        args = (reduction, None, None, "permissive", False, False)
        assert torch.equal(OPS.scatter_nd.default(x, i, u, *args), want)
        out = torch.full((4, 3), 7.)
        OPS.scatter_nd_out.default(x, i, u, *args, out=out)
        assert torch.equal(out, want)
        target = x.clone()
        OPS.scatter_nd_.default(target, i, u, *args)
        assert torch.equal(target, want)


# =============================================================================================
# top_k1
# =============================================================================================

TOPK_CASES = {
    "k_zero": lambda: top_k1(f32(3, 4), 0),
    "k_negative": lambda: top_k1(f32(3, 4), -1),
    "k_above_size": lambda: top_k1(f32(3, 4), 5),
    "k_above_size_other_axis": lambda: top_k1(f32(3, 4), 4, 0),
    "k_on_empty_axis": lambda: top_k1(f32(3, 0), 1),
    "axis_too_large": lambda: top_k1(f32(3, 4), 1, 2),
    "axis_too_small": lambda: top_k1(f32(3, 4), 1, -3),
    "axis_huge": lambda: top_k1(f32(3, 4), 1, 2**40),
    "input_rank_0": lambda: top_k1(torch.tensor(1.), 1, 0),
    "index_dtype_int16": lambda: top_k1(f32(4), 1, index_dtype=torch.int16),
    "index_dtype_uint64": lambda: top_k1(f32(4), 1, index_dtype=torch.uint64),
    "index_dtype_float": lambda: top_k1(f32(4), 1, index_dtype=torch.float32),
    "index_dtype_int32_axis_too_long": lambda: top_k1(
        torch.zeros(1, dtype=torch.int8).expand(2**31 + 6), 1, index_dtype=torch.int32),
    "index_dtype_uint32_axis_too_long": lambda: top_k1(
        torch.zeros(1, dtype=torch.int8).expand(2**32 + 6), 1, index_dtype=torch.uint32),
    "data_complex64": lambda: top_k1(f32(4).to(torch.complex64), 1),
    "data_complex128": lambda: top_k1(f32(4).to(torch.complex128), 1),
    "data_float8": lambda: top_k1(f32(4).to(torch.float8_e4m3fn), 1),
    "2_1_index_dtype_int64": lambda: top_k1(f32(1, 1, 3, 4), 2, 3, level="2_1"),
    "2_1_index_dtype_int32": lambda: top_k1(f32(1, 1, 3, 4), 2, 3, index_dtype=torch.int32,
                                            level="2_1"),
    "3_1_index_dtype_int64": lambda: top_k1(f32(3, 4), 2, level="3_1"),
    "2_1_data_float64": lambda: top_k1(f32(1, 1, 3, 4).double(), 2, 3,
                                       index_dtype=torch.uint32, level="2_1"),
    "2_1_data_int64": lambda: top_k1(torch.zeros(1, 1, 3, 4, dtype=I64), 2, 3,
                                     index_dtype=torch.uint32, level="2_1"),
    "2_1_rank_5": lambda: top_k1(f32(2, 2, 2, 2, 2), 1, index_dtype=torch.uint32, level="2_1"),
    "3_0_rank_5": lambda: top_k1(f32(2, 2, 2, 2, 2), 1, index_dtype=torch.uint32, level="3_0"),
    "3_1_rank_9": lambda: top_k1(f32(*(2,) * 9), 1, index_dtype=torch.uint32, level="3_1"),
    "input_on_meta_k_too_large": lambda: top_k1(f32(4).to("meta"), 5),
    "input_storage_freed": lambda: top_k1(freed(f32(4, 6)), 2),
    "input_storage_freed_axis_0": lambda: top_k1(freed(f32(4, 6)), 2, 0),
    "view_of_freed_base": lambda: _topk_view_of_freed(),
}


def _topk_view_of_freed():
    base = torch.ones(10)
    view = base[2:].view(2, 4)
    base.untyped_storage().resize_(0)
    return top_k1(view, 2)


@pytest.mark.parametrize("case", sorted(TOPK_CASES))
def test_top_k1_entry_point_raises_like_the_public_function(case):
    same_error(TOPK_CASES[case]())


@pytest.mark.parametrize("direction", ["up", "", "DECREASING", "Increasing", " decreasing", "1"])
def test_non_canonical_direction_raises_like_the_portable_kernel(direction):
    """The public function canonicalizes the direction (any case, an AxisDirection) and refuses
    the rest with its own message; the op takes the two canonical strings, and the C++ kernel
    refuses the rest as the portable kernel does."""
    msg = same_error(through_ops("top_k1", f32(4), 1, -1, direction, None, "permissive"))
    assert msg == (f"top_k1: direction (AxisDirection) must be 'decreasing' or 'increasing', "
                   f"got {direction!r}")


def test_top_k1_entry_point_index_dtype_none_is_int64():
    x = torch.tensor([[1., 5., 3., 5.]])
    v, i = OPS.top_k1.default(x, 2, -1, "decreasing", None, "permissive")
    assert i.dtype == torch.int64 and i.tolist() == [[1, 3]] and v.tolist() == [[5., 5.]]


# =============================================================================================
# The C++ kernel itself on tensors torch.ops sends elsewhere (meta: the fake kernel)
# =============================================================================================

def _cpp(op):
    """The extension's own CPU kernel (captured at import, before any backend block)."""
    return _backend._cpp_kernels()[op]


def test_cpp_kernels_are_what_native_runs():
    """The kernels called below are the extension's (registered by it for the CPU key)."""
    from conftest import CPP_KERNELS
    for op in ("gather_nd", "gather_nd_out", "gather_nd_backward", "scatter_nd",
               "scatter_nd_out", "scatter_nd_", "top_k1"):
        assert CPP_KERNELS[op], f"{op}: no C++ CPU kernel registered"


@pytest.mark.parametrize("where", ["input", "indices", "both"])
def test_cpp_gather_refuses_meta_tensors(where):
    x = f32(4, 5).to("meta") if where in ("input", "both") else f32(4, 5)
    i = ix([[1]]).to("meta") if where in ("indices", "both") else ix([[1]])
    with pytest.raises(ValueError) as e:
        _cpp("gather_nd").call_boxed(CPU, x, i, 0, None, None, "permissive", True)
    if where == "both":
        assert str(e.value) == "gather_nd: InputTensor is on meta; this kernel takes CPU tensors"
    else:
        with pytest.raises(ValueError) as want:
            tdo.gather_nd(x, i)
        assert str(e.value) == str(want.value)


@pytest.mark.parametrize("op", ["scatter_nd", "scatter_nd_", "scatter_nd_out", "top_k1",
                                "gather_nd_out", "gather_nd_backward"])
def test_cpp_kernels_refuse_meta_tensors(op):
    """Named as the Python layer names the op in its messages (the out= overloads as the
    functional op, the backward by its own name, as the portable backward's storage check)."""
    x, i, u = f32(4, 3).to("meta"), ix([[1]]).to("meta"), f32(1, 3).to("meta")
    who = {"scatter_nd": "scatter_nd: InputTensor", "scatter_nd_": "scatter_nd_: InputTensor",
           "scatter_nd_out": "scatter_nd: InputTensor", "top_k1": "top_k1: InputTensor",
           "gather_nd_out": "gather_nd: InputTensor", "gather_nd_backward":
           "gather_nd_backward: grad"}[op]
    with pytest.raises(ValueError) as e:
        if op == "top_k1":
            _cpp(op).call_boxed(CPU, x, 1, -1, "decreasing", None, "permissive")
        elif op == "gather_nd_out":
            _cpp(op).call_boxed(CPU, x, i, 0, None, None, "permissive", True, out=u)
        elif op == "gather_nd_backward":
            _cpp(op).call_boxed(CPU, u, i, [4], 0, None, None)
        elif op == "scatter_nd_out":
            _cpp(op).call_boxed(CPU, x, i, u, "none", None, None, "permissive", True, False,
                                out=torch.empty(4, 3, device="meta"))
        else:
            _cpp(op).call_boxed(CPU, x, i, u, "none", None, None, "permissive", True, False)
    assert str(e.value) == f"{who} is on meta; this kernel takes CPU tensors"


SPARSE = {
    "gather-input": ("gather_nd", "InputTensor",
                     lambda: gather(f32(4, 5).to_sparse(), ix([[0]]))),
    "gather-indices": ("gather_nd", "IndicesTensor",
                       lambda: gather(f32(4, 5), ix([[0]]).to_sparse())),
    "gather-out": ("gather_nd", "OutputTensor (out)",
                   lambda: gather(f32(4, 5), ix([[0], [1]]), out=torch.zeros(2, 5).to_sparse())),
    "scatter-input": ("scatter_nd", "InputTensor",
                      lambda: scatter(f32(4, 3).to_sparse(), ix([[1]]), f32(1, 3))),
    "scatter-updates": ("scatter_nd", "UpdatesTensor",
                        lambda: scatter(f32(4, 3), ix([[1]]), f32(1, 3).to_sparse())),
    "scatter-out": ("scatter_nd", "OutputTensor (out)",
                    lambda: scatter(f32(4, 3), ix([[1]]), f32(1, 3),
                                    out=torch.zeros(4, 3).to_sparse())),
    "scatter_-target": ("scatter_nd_", "InputTensor",
                        lambda: scatter(f32(4, 3).to_sparse(), ix([[1]]), f32(1, 3),
                                        variant="inplace")),
    "top_k1-input": ("top_k1", "InputTensor", lambda: top_k1(f32(3, 4).to_sparse(), 1)),
}


@pytest.mark.parametrize("case", sorted(SPARSE))
def test_sparse_tensors_are_refused_as_not_dense(case):
    """Only dense (strided) tensors: a ValueError naming the tensor, from the public function
    (on the portable path) and from the C++ entry point, rather than an error from inside torch
    (torch.ops sends a sparse CPU tensor to the SparseCPU key, not to the CPU kernel)."""
    op, role, build = SPARSE[case]
    want = (f"{op}: {role} is a sparse or otherwise non-strided tensor; only dense (strided) "
            f"tensors are supported")
    msg = same_error(build())
    assert msg == want


@pytest.mark.parametrize("op", ["gather_nd", "top_k1", "scatter_nd"])
def test_cpp_kernels_refuse_sparse_tensors(op):
    """The C++ kernels' own layout check, called directly (before any storage is touched)."""
    x = f32(4, 5).to_sparse()
    with pytest.raises(ValueError) as got:
        if op == "gather_nd":
            _cpp(op).call_boxed(CPU, x, ix([[1]]), 0, None, None, "permissive", True)
        elif op == "scatter_nd":
            _cpp(op).call_boxed(CPU, x, ix([[1]]), f32(1, 5), "none", None, None, "permissive",
                                True, False)
        else:
            _cpp(op).call_boxed(CPU, x, 1, -1, "decreasing", None, "permissive")
    assert str(got.value) == (f"{op}: InputTensor is a sparse or otherwise non-strided tensor; "
                              f"only dense (strided) tensors are supported")


# =============================================================================================
# Negative-bit tensors, version counters
# =============================================================================================

def test_neg_bit_inputs_read_with_their_sign_through_torch_ops():
    x = torch._neg_view(torch.arange(12.).reshape(4, 3))
    i = torch._neg_view(ix([[1], [3]]))                        # rows -1 and -3: 3 and 1
    u = torch._neg_view(torch.ones(2, 3))
    assert OPS.gather_nd.default(x, i).tolist() == [[-9., -10., -11.], [-3., -4., -5.]]
    s = OPS.scatter_nd.default(x, i, u, "add")
    want = -torch.arange(12.).reshape(4, 3)
    want[3] -= 1
    want[1] -= 1
    assert torch.equal(s, want)
    v, k = OPS.top_k1.default(x, 2, 0, "decreasing", None)
    assert v.tolist() == [[-0., -1., -2.], [-3., -4., -5.]] and k.tolist() == [[0] * 3, [1] * 3]
    assert x.is_neg() and i.is_neg() and u.is_neg()             # the views are left as they were


@pytest.mark.parametrize("op", ["gather_nd", "scatter_nd", "top_k1", "gather_nd_backward"])
def test_cpp_kernels_resolve_neg_bit_inputs_themselves(op):
    """The C++ kernel called below the dispatcher's Negative key (as the public functions'
    eager path does): it must read the values the tensors show, not their raw memory."""
    x = torch._neg_view(torch.arange(12.).reshape(4, 3))
    i = torch._neg_view(ix([[1], [3]]))
    if op == "gather_nd":
        got = _cpp(op).call_boxed(CPU, x, i, 0, None, None, "permissive", True)
        assert got.tolist() == [[-9., -10., -11.], [-3., -4., -5.]]
    elif op == "scatter_nd":
        u = torch._neg_view(torch.ones(2, 3))
        got = _cpp(op).call_boxed(CPU, x, i, u, "none", None, None, "permissive", True, False)
        want = -torch.arange(12.).reshape(4, 3)
        want[3] = -1.
        want[1] = -1.
        assert torch.equal(got, want)
    elif op == "top_k1":
        v, k = _cpp(op).call_boxed(CPU, x, 1, 0, "increasing", None, "permissive")
        assert v.tolist() == [[-9., -10., -11.]] and k.tolist() == [[3, 3, 3]]
    else:
        g = torch._neg_view(torch.ones(2, 3))
        got = _cpp(op).call_boxed(CPU, g, i, [4], 0, None, None)
        want = torch.zeros(4, 3)
        want[3] = -1.
        want[1] = -1.
        assert torch.equal(got, want)


@pytest.mark.parametrize("write", ["gather out", "scatter out", "scatter in place"])
@pytest.mark.parametrize("through", ["torch.ops", "the C++ kernel"])
def test_neg_bit_targets_are_written_through_the_negation(write, through):
    """As the public functions do (tests/test_torch_parity.py): the target shows the result."""
    raw = torch.zeros(2)
    t = torch._neg_view(raw)
    if through == "torch.ops":
        def call(op, *args, **kw):
            return getattr(OPS, op).default(*args, **kw)
    else:
        def call(op, *args, **kw):
            return _cpp(op).call_boxed(CPU, *args, **kw)
    if write == "gather out":
        call("gather_nd_out", torch.tensor([3., 1.]), ix([[1], [0]]), 0, None, None,
             "permissive", True, out=t)
        assert t.tolist() == [1., 3.]
    elif write == "scatter out":
        call("scatter_nd_out", torch.tensor([4., 4.]), ix([[1]]), torch.ones(1), "none", None,
             None, "permissive", True, False, out=t)
        assert t.tolist() == [4., 1.]
    else:
        call("scatter_nd_", t, ix([[1]]), torch.ones(1), "none", None, None, "permissive",
             True, False)
        assert t.tolist() == [0., 1.]
    assert torch.equal(raw, -t.resolve_neg())


@pytest.mark.parametrize("write", ["gather_nd_out", "scatter_nd_out", "scatter_nd_"])
def test_entry_point_writes_bump_the_version_counter(write):
    x, i, u = torch.zeros(4, 3), ix([[1]]), torch.ones(1, 3)
    if write == "gather_nd_out":
        t = torch.zeros(1, 3)
        v = t._version
        OPS.gather_nd_out.default(torch.arange(12.).reshape(4, 3), i, out=t)
        assert t.tolist() == [[3., 4., 5.]]
    elif write == "scatter_nd_out":
        t = torch.zeros(4, 3)
        v = t._version
        OPS.scatter_nd_out.default(x, i, u, out=t)
        assert t[1].tolist() == [1., 1., 1.]
    else:
        t = x
        v = t._version
        OPS.scatter_nd_.default(t, i, u)
        assert t[1].tolist() == [1., 1., 1.]
    assert t._version > v


def test_entry_points_on_empty_tensors_need_no_storage():
    x = torch.randn(8, 4)
    i = freed(torch.zeros(0, 1, dtype=I64))
    assert OPS.gather_nd.default(x, i).shape == (0, 4)
    assert torch.equal(OPS.scatter_nd.default(x, i, freed(torch.zeros(0, 4))), x)
    assert OPS.top_k1.default(freed(torch.zeros(0, 5)), 2)[0].shape == (0, 2)
