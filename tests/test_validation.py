"""One case per documented constraint and feature level (spec pages' tables; spec README)."""
import pytest
import torch

import torch_dml_ops as tdo
from torch_dml_ops import ConstraintError, ConstraintTypeError
from helpers import DATA_DTYPES, DML_DATA_DTYPES, INDEX_DTYPES, make_data

gather_op = torch.ops.torch_dml_ops.gather_nd
U32 = torch.uint32


def x4(shape=(1, 2, 3, 4), dtype=torch.float32):
    return make_data(shape, dtype)


def idx(values, dtype=U32, shape=None):
    t = torch.tensor(values).to(dtype)
    return t.reshape(shape) if shape else t


# ------------------------------------------------------------------ feature level plumbing

def test_feature_level_aliases_and_nesting():
    assert tdo.get_feature_level() == "permissive"
    for alias in ("2_1", "2.1", "FEATURE_LEVEL_2_1", "DML_FEATURE_LEVEL_2_1", "dml_feature_level_2_1"):
        with tdo.feature_level(alias) as lvl:
            assert lvl == "2_1" == tdo.get_feature_level()
    with tdo.feature_level("3_0"):
        with tdo.feature_level("2_1"):
            assert tdo.get_feature_level() == "2_1"
        with tdo.feature_level(None):
            assert tdo.get_feature_level() == "permissive"
        assert tdo.get_feature_level() == "3_0"
    assert tdo.get_feature_level() == "permissive"


def test_feature_level_restored_after_exception():
    with pytest.raises(RuntimeError):
        with tdo.feature_level("2_1"):
            raise RuntimeError("boom")
    assert tdo.get_feature_level() == "permissive"


@pytest.mark.parametrize("bad", ["4_0", "2_2", "", 21])
def test_feature_level_unknown(bad):
    if bad == "":
        assert tdo.feature_level(bad).level == "permissive"
        return
    with pytest.raises((ValueError, TypeError)):
        tdo.feature_level(bad)


def test_op_feature_level_argument_must_be_canonical(any_backend):
    """Through torch.ops, below the public functions: every backend raises the library's
    ConstraintError for a level's rule (the op's Autograd kernel checks the level in Python; the
    C++ kernels ignore it: tests/test_entry_points.py)."""
    if any_backend == "triton" and torch.cuda.is_available():
        pytest.skip("CPU tensors run the Triton kernels only in the interpreter (no GPU)")
    with pytest.raises(ValueError, match="canonical"):
        gather_op(torch.randn(3), torch.tensor([[1]]), 0, None, None, "2.1", True)
    with pytest.raises(ConstraintError, match="DML_FEATURE_LEVEL_2_1"):
        gather_op(torch.randn(3), torch.tensor([[1]]), 0, None, None, "2_1", True)


def test_error_hierarchy():
    assert issubclass(ConstraintError, ValueError)
    assert issubclass(ConstraintTypeError, ConstraintError) and issubclass(ConstraintTypeError, TypeError)


# ------------------------------------------------------------------ data types per level

@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=str)
@pytest.mark.parametrize("level", ["2_1", "3_0", "3_1", None])
def test_gather_nd_data_types_per_level(level, dtype):
    x = x4(dtype=dtype)
    i = idx([0, 1], shape=(1, 1, 1, 2))
    call = lambda: tdo.gather_nd(x, i, input_dimension_count=4, indices_dimension_count=1)
    with tdo.feature_level(level):
        if level is None or dtype in DML_DATA_DTYPES:
            assert call().shape == (1, 1, 3, 4)
        else:
            with pytest.raises(ConstraintTypeError) as e:
                call()
            msg = str(e.value)
            assert "InputTensor" in msg and str(dtype) in msg and f"DML_FEATURE_LEVEL_{level}" in msg


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES + [torch.int16, torch.uint8], ids=str)
@pytest.mark.parametrize("level", ["2_1", "3_0", "3_1", None])
def test_gather_nd_index_types_per_level(level, index_dtype):
    x = x4()
    i = idx([0, 1], index_dtype, shape=(1, 1, 1, 2))
    ok = index_dtype in INDEX_DTYPES and (level != "2_1" or index_dtype == torch.uint32)
    with tdo.feature_level(level):
        if ok:
            tdo.gather_nd(x, i, input_dimension_count=4, indices_dimension_count=1)
        else:
            with pytest.raises(ConstraintTypeError, match="IndicesTensor.*index type"):
                tdo.gather_nd(x, i, input_dimension_count=4, indices_dimension_count=1)


def test_gather_nd_2_1_signed_indices_hint_negative_from_3_0():
    x = x4()
    i = idx([0, -1], torch.int64, shape=(1, 1, 1, 2))
    with tdo.feature_level("2_1"), pytest.raises(ConstraintTypeError, match="negative indices.*3_0"):
        tdo.gather_nd(x, i, input_dimension_count=4, indices_dimension_count=1)
    with tdo.feature_level("3_0"):
        out = tdo.gather_nd(x, i, input_dimension_count=4, indices_dimension_count=1)
    assert torch.equal(out, x[:, 1:2])


# ------------------------------------------------------------------ dimension counts per level

@pytest.mark.parametrize("n", [1, 3, 4, 5, 8, 9])
@pytest.mark.parametrize("level", ["2_1", "3_0", None])
def test_gather_nd_dml_form_dimension_count(level, n):
    x = torch.randn((1,) * (n - 1) + (3,))
    i = torch.zeros((1,) * (n - 1) + (1,), dtype=U32)
    allowed = {"2_1": n == 4, "3_0": 1 <= n <= 8, None: True}[level]
    with tdo.feature_level(level):
        if allowed:
            out = tdo.gather_nd(x, i, input_dimension_count=1, indices_dimension_count=1)
            assert out.shape == (1,) * n
        else:
            with pytest.raises(ConstraintError, match=rf"InputTensor.DimensionCount must be .* got {n}"):
                tdo.gather_nd(x, i, input_dimension_count=1, indices_dimension_count=1)


@pytest.mark.parametrize("level,limit", [("2_1", 4), ("3_0", 8), ("3_1", 8)])
def test_gather_nd_natural_form_counts_as_padded(level, limit):
    with tdo.feature_level(level):
        x = torch.randn((2,) * limit)
        tdo.gather_nd(x, torch.zeros(1, 1, dtype=U32))           # output has limit dims: fits
        with pytest.raises(ConstraintError, match=f"InputTensor has {limit + 1} dimensions"):
            tdo.gather_nd(torch.randn((2,) * (limit + 1)), torch.zeros(1, 1, dtype=U32))
        with pytest.raises(ConstraintError, match=f"OutputTensor has {limit + 1} dimensions"):
            tdo.gather_nd(x, torch.zeros(2, 2, 1, dtype=U32))   # 2 + (limit - 1) dims
        with pytest.raises(ConstraintError, match=f"IndicesTensor has {limit + 1} dimensions"):
            tdo.gather_nd(torch.randn(2), torch.zeros((1,) * (limit + 1), dtype=U32))


def test_gather_nd_permissive_allows_any_rank():
    x = torch.randn((2,) * 10)
    assert tdo.gather_nd(x, torch.zeros(3, 2, dtype=torch.int64)).shape == (3,) + (2,) * 8


# ------------------------------------------------------------------ batch dims per level

def test_gather_nd_batch_dims_need_3_0():
    x = torch.randn(2, 3, 4)
    i = torch.zeros(2, 5, 1, dtype=U32)
    with tdo.feature_level("2_1"), pytest.raises(ConstraintError, match="GATHER_ND1.*3_0"):
        tdo.gather_nd(x, i, 1)
    with tdo.feature_level("3_0"):
        assert tdo.gather_nd(x, i, 1).shape == (2, 5, 4)


# ------------------------------------------------------------------ shape rules (every level)

@pytest.mark.parametrize("x_shape,i_shape,b,ci,cq,match", [
    ((3, 4), (2, 3), 0, None, None, r"index-tuple size and must be in \[1, 2\].*got 3"),
    ((3, 4), (2, 0), 0, None, None, r"index-tuple size.*got 0"),
    ((3, 4), (), 0, None, None, "IndicesTensor must have at least 1 dimension"),
    ((), (1,), 0, None, None, "InputTensor must have at least 1 dimension"),
    ((2, 4), (3, 1), 1, None, None, r"batch dimension 0 differs: IndicesTensor has 3, InputTensor has 2"),
    ((2, 4), (2, 1), 2, None, None, r"batch_dims .* must be in \[0, min"),
    ((2, 4), (2, 1), -1, None, None, r"batch_dims .* must be in \[0, min"),
    ((1, 3, 4), (1, 2, 1), 0, 2, None, "needs both"),
    ((1, 3, 4), (2, 1), 0, 2, 2, "IndicesTensor.DimensionCount must equal InputTensor.DimensionCount"),
    ((1, 3, 4), (1, 2, 1), 0, 4, 2, r"input_dimension_count must be in \[1, InputTensor.DimensionCount = 3\], got 4"),
    ((1, 3, 4), (1, 2, 1), 0, 2, 0, r"indices_dimension_count must be in \[1, IndicesTensor.DimensionCount = 3\], got 0"),
    ((2, 3, 4), (1, 2, 1), 0, 2, 2, "InputTensor has size 2 in dimension 0.*padding dimensions must have size 1"),
    ((1, 3, 4), (2, 2, 1), 0, 2, 2, "IndicesTensor has size 2 in dimension 0"),
    ((1, 3, 4), (2, 2, 1), 0, 3, 3, "OutputTensor needs 4 dimensions.*more than the DimensionCount 3"),
])
def test_gather_nd_shape_rules(x_shape, i_shape, b, ci, cq, match):
    x = torch.randn(x_shape)
    i = torch.zeros(i_shape, dtype=torch.int64)
    with pytest.raises(ConstraintError, match=match):
        tdo.gather_nd(x, i, b, input_dimension_count=ci, indices_dimension_count=cq)


def test_gather_nd_rules_hold_under_fake_tensors():
    """The fake kernel runs the same checks, so tracing fails like eager does."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.randn(3, 4)
        with pytest.raises(ConstraintError, match="index-tuple size"):
            tdo.gather_nd(x, torch.zeros(2, 3, dtype=torch.int64))
        with tdo.feature_level("2_1"), pytest.raises(ConstraintTypeError, match="index type"):
            tdo.gather_nd(x, torch.zeros(2, 1, dtype=torch.int64))
        assert tdo.gather_nd(x, torch.zeros(5, 1, dtype=torch.int64)).shape == (5, 4)


def test_gather_nd_device_mismatch():
    x = torch.randn(3, 4)
    i = torch.zeros(2, 1, dtype=torch.int64, device="meta")
    with pytest.raises((ValueError, RuntimeError), match="device|meta"):
        tdo.gather_nd(x, i)


def test_validation_failure_modifies_nothing():
    x = torch.randn(1, 3, 4)
    i = torch.zeros(1, 2, 1, dtype=torch.int64)
    out = torch.full((1, 2, 4), 3.0)
    x0, i0 = x.clone(), i.clone()
    with tdo.feature_level("2_1"), pytest.raises(ConstraintError):
        tdo.gather_nd(x, i, out=out)
    assert torch.equal(x, x0) and torch.equal(i, i0) and torch.equal(out, torch.full((1, 2, 4), 3.0))


# ------------------------------------------------------------------ scatter_nd

def _scatter_dml(n=4, dtype=torch.float32, index_dtype=U32):
    x = make_data((1,) * (n - 2) + (3, 2), dtype)
    i = torch.tensor([[2], [0]]).to(index_dtype).reshape((1,) * (n - 2) + (2, 1))
    u = make_data((1,) * (n - 2) + (2, 2), dtype)
    return x, i, u


@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=str)
@pytest.mark.parametrize("level", ["2_1", "3_0", None])
def test_scatter_nd_data_types_per_level(level, dtype):
    x, i, u = _scatter_dml(dtype=dtype)
    with tdo.feature_level(level):
        if level is None or dtype in DML_DATA_DTYPES:
            tdo.scatter_nd(x, i, u, input_dimension_count=2, indices_dimension_count=2)
        else:
            with pytest.raises(ConstraintTypeError, match="InputTensor.*not a supported data type"):
                tdo.scatter_nd(x, i, u, input_dimension_count=2, indices_dimension_count=2)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("level", ["2_1", "3_0"])
def test_scatter_nd_index_types_per_level(level, index_dtype):
    x, i, u = _scatter_dml(index_dtype=index_dtype)
    with tdo.feature_level(level):
        if level == "3_0" or index_dtype == U32:
            tdo.scatter_nd(x, i, u, input_dimension_count=2, indices_dimension_count=2)
        else:
            with pytest.raises(ConstraintTypeError, match="IndicesTensor.*index type"):
                tdo.scatter_nd(x, i, u, input_dimension_count=2, indices_dimension_count=2)


@pytest.mark.parametrize("n", [2, 4, 8, 9])
@pytest.mark.parametrize("level", ["2_1", "3_1"])
def test_scatter_nd_dml_dimension_count(level, n):
    x, i, u = _scatter_dml(n)
    ok = n == 4 if level == "2_1" else n <= 8
    with tdo.feature_level(level):
        if ok:
            tdo.scatter_nd(x, i, u, input_dimension_count=2, indices_dimension_count=2)
        else:
            with pytest.raises(ConstraintError, match=f"DimensionCount must be .* got {n}"):
                tdo.scatter_nd(x, i, u, input_dimension_count=2, indices_dimension_count=2)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_nd_reductions_only_permissive(reduction):
    x, i, u = _scatter_dml()
    tdo.scatter_nd(x, i, u, reduction, input_dimension_count=2, indices_dimension_count=2)
    with tdo.feature_level("3_1"), pytest.raises(ConstraintError, match="ONNX ScatterND-18 extension"):
        tdo.scatter_nd(x, i, u, reduction, input_dimension_count=2, indices_dimension_count=2)


@pytest.mark.parametrize("x_shape,i_shape,u_shape,kw,exc,match", [
    ((4, 3), (2, 1), (2, 3), dict(reduction="sum"), ValueError, "reduction must be one of"),
    ((4, 3), (2, 1), (2, 2), {}, ConstraintError, r"UpdatesTensor must have sizes \(2, 3\)"),
    ((4, 3), (2, 3), (2,), {}, ConstraintError, "index-tuple size"),
    ((1, 4, 3), (1, 2, 1), (2, 3), dict(input_dimension_count=2, indices_dimension_count=2),
     ConstraintError, "UpdatesTensor.DimensionCount must equal"),
    ((2, 4, 3), (1, 2, 1), (1, 2, 3), dict(input_dimension_count=2, indices_dimension_count=2),
     ConstraintError, "InputTensor has size 2 in dimension 0"),
])
def test_scatter_nd_shape_rules(x_shape, i_shape, u_shape, kw, exc, match):
    with pytest.raises(exc, match=match):
        tdo.scatter_nd(torch.randn(x_shape), torch.zeros(i_shape, dtype=torch.int64),
                       torch.randn(u_shape), **kw)


def test_scatter_nd_updates_dtype_must_match():
    with pytest.raises(ConstraintTypeError, match="UpdatesTensor has dtype torch.float64 but InputTensor has torch.float32"):
        tdo.scatter_nd(torch.randn(4), torch.tensor([[1]]), torch.randn(1, dtype=torch.float64))


def test_scatter_nd_validation_failure_modifies_nothing():
    x = torch.randn(4, 3)
    x0 = x.clone()
    with tdo.feature_level("2_1"), pytest.raises(ConstraintError):
        tdo.scatter_nd_(x, torch.tensor([[1]]), torch.randn(1, 3))     # int64 indices at 2_1
    with pytest.raises(ConstraintError):
        tdo.scatter_nd_(x, torch.tensor([[1]]), torch.randn(1, 2))
    assert torch.equal(x, x0)


# ------------------------------------------------------------------ top_k1

@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=str)
@pytest.mark.parametrize("level", ["2_1", "3_1", None])
def test_top_k1_data_types_per_level(level, dtype):
    x = make_data((1, 1, 3, 4), dtype)
    kw = dict(index_dtype=torch.uint32)
    with tdo.feature_level(level):
        if level is None or dtype in DML_DATA_DTYPES:
            tdo.top_k1(x, 2, 3, **kw)
        else:
            with pytest.raises(ConstraintTypeError, match="InputTensor.*not a supported data type"):
                tdo.top_k1(x, 2, 3, **kw)


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("level", ["2_1", "3_0", "3_1"])
def test_top_k1_index_dtype_must_be_uint32_under_a_level(level, index_dtype):
    x = torch.randn(1, 1, 3, 4)
    with tdo.feature_level(level), pytest.raises(ConstraintTypeError, match="pass index_dtype=torch.uint32"):
        tdo.top_k1(x, 2, 3, index_dtype=index_dtype)
    tdo.top_k1(x, 2, 3, index_dtype=index_dtype)       # fine at the permissive level


@pytest.mark.parametrize("rank", [1, 4, 5, 8, 9])
@pytest.mark.parametrize("level", ["2_1", "3_0", "3_1"])
def test_top_k1_dimension_count_per_level(level, rank):
    x = torch.randn((2,) * rank)
    limit = 8 if level == "3_1" else 4
    with tdo.feature_level(level):
        if rank <= limit:
            tdo.top_k1(x, 1, -1, index_dtype=torch.uint32)
        else:
            with pytest.raises(ConstraintError, match=f"InputTensor has {rank} dimensions"):
                tdo.top_k1(x, 1, -1, index_dtype=torch.uint32)


def test_top_k1_k_equal_to_size_allowed_and_axis_error_type():
    x = torch.randn(1, 1, 3, 4)
    with tdo.feature_level("2_1"):
        res = tdo.top_k1(x, 4, 3, index_dtype=torch.uint32)    # spec README 4: K == size allowed
    assert res.values.shape == (1, 1, 3, 4)
    with pytest.raises(tdo.ConstraintIndexError, match="Axis 4"):
        tdo.top_k1(x, 1, 4)
    assert issubclass(tdo.ConstraintIndexError, IndexError)


def test_docs_sample_level_message_is_the_real_one():
    """docs/semantics.md quotes a feature-level refusal; it must be what the library raises
    (issue 19: its wording had drifted)."""
    import pathlib
    import re
    readme = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "semantics.md").read_text()
    quoted = re.search(r"e\.g\. `(gather_nd: IndicesTensor has dtype torch\.int64.*?)`\.", readme,
                       re.S)
    assert quoted, "the sample message is gone from docs/semantics.md"
    with tdo.feature_level("2_1"), pytest.raises(tdo.ConstraintTypeError) as e:
        tdo.gather_nd(torch.randn(3), torch.tensor([[1]]))
    assert " ".join(quoted.group(1).split()) == str(e.value)


@pytest.mark.parametrize("call", ["public", "torch.ops"])
@pytest.mark.parametrize("refused", ["data", "indices"])
def test_a_refusal_at_the_default_says_what_permissive_means(refused, call):
    """A type refused at the default level says that no level is chosen, what the default takes
    and how to choose a DirectML level (issue 38: "at the permissive default", unexplained),
    from the Python layer and from the C++ kernels (torch.ops) alike."""
    x, i = torch.zeros(4, 3), torch.tensor([[1], [2]])
    if refused == "data":
        x = x.to(torch.complex64)
    else:
        i = i.to(torch.int16)
    fn = tdo.gather_nd if call == "public" else gather_op
    with pytest.raises(ConstraintTypeError if call == "public" else Exception) as e:
        fn(x, i)
    text = str(e.value)
    assert ("at the permissive default (no DirectML feature level chosen: every type and rank "
            "this library takes; torch_dml_ops.feature_level('2_1'), '3_0' or '3_1' enforces "
            "that level's tables)") in text, text
    assert ("complex64" if refused == "data" else "int16") in text, text
