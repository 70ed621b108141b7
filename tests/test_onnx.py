"""ONNX export (torch_dml_ops.onnx): every mapping exported, checked with onnx.checker, run in
onnxruntime's CPU provider on inputs with duplicates, ties, NaN and signed zeros, and compared with
eager bit for bit (values, NaN positions, signs of zeros, indices).

Each export costs about a second, so one model covers several cases (one output each)."""
import warnings

import pytest
import torch

onnx = pytest.importorskip("onnx", reason="ONNX export tests need onnx: pip install -e .[onnx]")
ort = pytest.importorskip("onnxruntime",
                          reason="ONNX export tests need onnxruntime: pip install -e .[onnx]")
pytest.importorskip("onnxscript", reason="ONNX export tests need onnxscript: pip install -e .[onnx]")

import numpy as np  # noqa: E402

import torch_dml_ops as tdo  # noqa: E402
import torch_dml_ops.onnx as tdo_onnx  # noqa: E402

pytestmark = pytest.mark.compile

#: dtypes onnxruntime's Python API feeds and returns directly; bfloat16 crosses the boundary as
#: float32 (an exact widening) inside the models below.
DATA_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
               torch.int32, torch.int16, torch.int8, torch.uint8, torch.uint16, torch.uint32,
               torch.uint64, torch.bool]


def _values(dtype, n, g, special=True):
    """n values of ``dtype`` drawn from a small set (ties), with NaN, +-inf and -0.0 for floats."""
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_floating_point:
        pool = torch.tensor([0.0, -0.0, 1.0, -1.0, 2.5, 0.5] +
                            ([float("nan"), float("inf"), -float("inf")] if special else []))
        return pool[torch.randint(0, len(pool), (n,), generator=g)].to(dtype)
    hi = 5
    return torch.randint(0, hi, (n,), generator=g).to(dtype)


def _run(program, args):
    onnx.checker.check_model(program.model_proto, full_check=True)
    session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    return [_tensor(o) for o in session.run(None, feeds)]


def _tensor(array):
    # onnxruntime returns uint64 as numpy.ulonglong, which torch.from_numpy refuses.
    array = np.asarray(array)
    return torch.from_numpy(array.view(np.dtype(array.dtype.str)))


def _export(model, args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tdo_onnx.export(model, args, **kw)


def _same(got, want, what, zero_sign=True):
    """Equal values, NaN positions and (``zero_sign``) signs of zeros."""
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got, want)
    if want.dtype.is_floating_point:
        w, g = want.double(), got.double()
        assert torch.equal(torch.isnan(g), torch.isnan(w)), (what, got, want)
        if zero_sign:
            assert torch.equal(torch.signbit(g[~torch.isnan(g)]),
                               torch.signbit(w[~torch.isnan(w)])), (what, got, want)
        assert torch.equal(g.nan_to_num(0.0), w.nan_to_num(0.0)), (what, got, want)
    else:
        assert torch.equal(got, want), (what, got, want)


def _check(model, args, unsigned_zeros=(), **kw):
    """Export ``model``, run it in onnxruntime, compare every output with eager; the outputs in
    ``unsigned_zeros`` are compared without the sign of zeros (README: known differences)."""
    program = _export(model, args, **kw)
    got = _run(program, args)
    with torch.no_grad():
        want = model(*[a.clone() for a in args])
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        _same(g, w, f"output {i}", zero_sign=i not in unsigned_zeros)
    return program


def _io(dtype):
    """(the model's input dtype, the cast into the op's dtype, the cast back)."""
    if dtype == torch.bfloat16:
        return torch.float32, (lambda x: x.to(torch.bfloat16)), (lambda y: y.float())
    return dtype, (lambda x: x), (lambda y: y)


def _ops(program):
    return {n.op_type for n in program.model_proto.graph.node}


# gather_nd -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=str)
def test_gather_nd_every_data_dtype(dtype):
    g = torch.Generator().manual_seed(1)
    io, cin, cout = _io(dtype)

    class M(torch.nn.Module):
        def forward(self, x, i, j):
            x = cin(x)
            return (cout(tdo.gather_nd(x, i)),                      # rows, negative indices
                    cout(tdo.gather_nd(x, j)),                      # elements
                    cout(tdo.gather_nd(x.reshape(2, 3, 4), i[:4].reshape(2, 2, 1) % 3,
                                       batch_dims=1)))

    x = _values(dtype, 24, g).reshape(6, 4)
    x = x.float() if dtype == torch.bfloat16 else x
    i = torch.tensor([[5], [-1], [0], [-6], [2], [5]])
    j = torch.tensor([[0, 3], [5, -1], [0, 3], [-2, 1]])
    program = _check(M(), (x, i, j))
    assert "GatherND" in _ops(program)


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.uint32, torch.uint64], ids=str)
def test_gather_nd_index_dtypes(index_dtype):
    class M(torch.nn.Module):
        def forward(self, x, i):
            return tdo.gather_nd(x, i), tdo.gather_nd(x, i[:, :1], batch_dims=0)

    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(2))
    signed = [[4, 2], [0, 0], [4, 2], [1, 1]] if index_dtype != torch.int32 else [[-1, 2], [0, -3], [4, 2], [1, 1]]
    _check(M(), (x, torch.tensor(signed).to(index_dtype)))


def test_gather_nd_uint64_indices_at_or_above_2_63_are_out_of_range_not_negative():
    class M(torch.nn.Module):
        def forward(self, x, i):
            return tdo.gather_nd(x, i)

    x = torch.randn(5, 3)
    program = _export(M(), (x, torch.tensor([[1]], dtype=torch.uint64)))
    session = ort.InferenceSession(program.model_proto.SerializeToString())
    # 2**64 - 1 would be -1 (the last row) if cast naively to int64; eager refuses it.
    bad = torch.tensor([[2**64 - 1]], dtype=torch.uint64)
    with pytest.raises(IndexError):
        tdo.gather_nd(x, bad)
    with pytest.raises(Exception, match="(?i)invalid|out of|bound|range"):
        session.run(None, {"x": x.numpy(), "i": bad.numpy()})
    ok = session.run(None, {"x": x.numpy(), "i": np.array([[3]], dtype=np.uint64)})[0]
    assert np.array_equal(ok, x[3:4].numpy())


def test_gather_nd_dml_form():
    class M(torch.nn.Module):
        def forward(self, x, i):
            return (tdo.gather_nd(x, i, input_dimension_count=2, indices_dimension_count=2),
                    tdo.gather_nd(x, i[..., :1, :], input_dimension_count=2,
                                  indices_dimension_count=1))

    x = torch.arange(24.).reshape(1, 1, 6, 4)
    i = torch.tensor([[[[1], [5], [0]]]], dtype=torch.uint32)
    _check(M(), (x, i))


# scatter_nd ------------------------------------------------------------------------------------

REDUCTIONS = ["none", "add", "mul", "max", "min"]


@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=str)
def test_scatter_nd_every_reduction_and_dtype(dtype):
    """Duplicates in the indices, NaN/inf/-0.0 in the data and the updates."""
    g = torch.Generator().manual_seed(3)
    io, cin, cout = _io(dtype)
    narrow = dtype in (torch.float16, torch.bfloat16)
    reductions = [r for r in REDUCTIONS if not (narrow and r in ("add", "mul"))]

    class M(torch.nn.Module):
        def forward(self, x, i, u):
            x, u = cin(x), cin(u)
            return tuple(cout(tdo.scatter_nd(x, i, u, reduction=r)) for r in reductions)

    x = _values(dtype, 24, g).reshape(6, 4)
    u = _values(dtype, 28, g).reshape(7, 4)
    if dtype == torch.bfloat16:
        x, u = x.float(), u.float()
    i = torch.tensor([[1], [-1], [1], [0], [5], [1], [3]])
    # max/min: which zero stays when +0.0 meets -0.0 differs (README, known differences).
    extrema = [n for n, r in enumerate(reductions) if r in ("max", "min")]
    program = _check(M(), (x, i, u), unsigned_zeros=extrema)
    assert "ScatterND" in _ops(program)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", ["add", "mul"])
def test_scatter_nd_narrow_float_add_mul_refused_at_export(dtype, reduction):
    class M(torch.nn.Module):
        def forward(self, x, i, u):
            return tdo.scatter_nd(x.to(dtype), i, u.to(dtype), reduction=reduction).float()

    with pytest.raises(tdo_onnx.OnnxExportError, match=f"reduction='{reduction}'.*{str(dtype)[6:]}"):
        _export(M(), (torch.zeros(4, 2), torch.tensor([[1], [1]]), torch.ones(2, 2)))


def test_scatter_nd_tuple_size_0():
    """k = 0 (ONNX ScatterND allows it: each update covers the whole input): onnxruntime
    applies the tuples in index order, as eager does, in both forms and for every reduction."""
    class M(torch.nn.Module):
        def forward(self, x, i, u, i32):
            return tuple([tdo.scatter_nd(x, i, u, reduction=r) for r in REDUCTIONS]
                         + [tdo.scatter_nd(x.reshape(1, 3, 4), i32.reshape(1, 3, 0), u,
                                           "add", input_dimension_count=2,
                                           indices_dimension_count=2)])

    g = torch.Generator().manual_seed(8)
    x = _values(torch.float32, 12, g, special=False).reshape(3, 4)
    u = _values(torch.float32, 36, g, special=False).reshape(3, 3, 4)
    program = _check(M(), (x, torch.zeros(3, 0, dtype=torch.int64), u,
                           torch.zeros(3, 0, dtype=torch.int32)), unsigned_zeros=(3, 4))
    assert "ScatterND" in _ops(program)


def test_scatter_nd_index_dtypes_dml_form_and_deterministic():
    class M(torch.nn.Module):
        def forward(self, x, i32, iu32, iu64, u):
            return (torch.ops.torch_dml_ops.scatter_nd(x, i32, u, deterministic=True),
                    tdo.scatter_nd(x, iu32, u, reduction="add"),
                    tdo.scatter_nd(x, iu64, u, reduction="max"),
                    tdo.scatter_nd(x.reshape(1, 6, 4), iu32.reshape(1, 3, 1), u.reshape(1, 3, 4),
                                   input_dimension_count=2, indices_dimension_count=2))

    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(4))
    u = torch.randn(3, 4, generator=torch.Generator().manual_seed(5))
    idx = [[2], [0], [2]]
    _check(M(), (x, torch.tensor([[2], [-6], [-4]], dtype=torch.int32),
                 torch.tensor(idx, dtype=torch.uint32), torch.tensor(idx, dtype=torch.uint64), u))


def test_in_place_and_out_into_views_and_a_kv_cache():
    class M(torch.nn.Module):
        def forward(self, cache, x, u, i, gi):
            tdo.scatter_nd_(cache[:, 1:3].transpose(0, 1), i, u)     # a view of the base
            tdo.scatter_nd_(cache, i[:1], cache[:1] * 2, reduction="add")
            buf = torch.empty(2, 4)
            tdo.gather_nd(x, gi, out=buf)
            sbuf = torch.empty(6, 4)
            tdo.scatter_nd(x, gi, buf, reduction="mul", out=sbuf)
            return cache, buf, sbuf

    cache, x = torch.randn(6, 4), torch.randn(6, 4)
    u, i, gi = torch.randn(2, 6), torch.tensor([[0], [1]]), torch.tensor([[3], [-1]])
    program = _check(M(), (cache, x, u, i, gi))
    assert {"ScatterND", "GatherND"} <= _ops(program)


def test_plain_torch_onnx_export_with_the_table_and_exporting():
    class M(torch.nn.Module):
        def forward(self, cache, u, i):
            tdo.scatter_nd_(cache, i, u)
            return cache, tdo.top_k1(cache, 2)[1]

    args = (torch.zeros(4, 3), torch.ones(1, 3), torch.tensor([[2]]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tdo_onnx.exporting():
            program = torch.onnx.export(M(), args, dynamo=True, verbose=False,
                                        custom_translation_table=tdo_onnx.translation_table())
    got = _run(program, args)
    want = M()(*[a.clone() for a in args])
    for g, w in zip(got, want):
        _same(g, w, "plain export")
    # exporting() is gone afterwards: the in-place op is reinplaceable again for compile/AOTI.
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("torch_dml_ops::scatter_nd_",
                                                              "Functionalize")


# top_k1 ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [d for d in DATA_DTYPES if d != torch.uint64], ids=str)
def test_top_k1_every_dtype_both_directions_stable_ties(dtype):
    g = torch.Generator().manual_seed(6)
    io, cin, cout = _io(dtype)

    class M(torch.nn.Module):
        def forward(self, x):
            x = cin(x)
            outs = []
            for direction in ("decreasing", "increasing"):
                for k, axis in ((3, -1), (9, 1), (1, 0), (4, 0)):
                    v, i = tdo.top_k1(x, k, axis=axis, direction=direction)
                    outs += [cout(v), i]
            v, i = tdo.top_k1(x, 5, index_dtype=torch.int32)
            w, j = tdo.top_k1(x, 5, direction="increasing", index_dtype=torch.uint32)
            return tuple(outs) + (cout(v), i, cout(w), j)

    x = _values(dtype, 36, g).reshape(4, 9)
    x = x.float() if dtype == torch.bfloat16 else x
    program = _check(M(), (x,))
    assert "TopK" in _ops(program)


def test_top_k1_uint64_refused_at_export():
    class M(torch.nn.Module):
        def forward(self, x):
            return tdo.top_k1(x, 2)

    with pytest.raises(tdo_onnx.OnnxExportError, match="uint64"):
        _export(M(), (torch.tensor([3, 1, 4, 1, 5], dtype=torch.uint64),))


# shapes, levels, demo --------------------------------------------------------------------------

def test_dynamic_shapes_run_at_other_shapes():
    class M(torch.nn.Module):
        def forward(self, x, i, u):
            y = tdo.scatter_nd(x, i, u, reduction="add")
            return tdo.gather_nd(y, i), tdo.top_k1(y, 2, axis=1)

    batch, seq = torch.export.Dim("batch", min=2), torch.export.Dim("seq", min=2)
    args = (torch.randn(4, 5), torch.tensor([[1], [3], [1]]), torch.randn(3, 5))
    program = _export(M(), args, dynamic_shapes=({0: batch, 1: seq}, {0: torch.export.Dim("n")},
                                                 {0: torch.export.Dim("n"), 1: seq}))
    session = ort.InferenceSession(program.model_proto.SerializeToString())
    for rows, cols, n in ((7, 3, 5), (2, 9, 1)):
        g = torch.Generator().manual_seed(rows)
        a = (torch.randint(-3, 4, (rows, cols), generator=g).float(),
             torch.randint(-rows, rows, (n, 1), generator=g),
             torch.randint(-3, 4, (n, cols), generator=g).float())
        got = session.run(None, {s.name: t.numpy() for s, t in zip(session.get_inputs(), a)})
        want = M()(*a)
        want = [want[0], want[1][0], want[1][1]]
        for gg, w in zip(got, want):
            _same(_tensor(gg), w, f"shape {rows}x{cols}")


def test_feature_level_violation_fails_at_export():
    class M(torch.nn.Module):
        def forward(self, x, i):
            return tdo.gather_nd(x, i)

    args = (torch.randn(4, 3), torch.tensor([[1]]))      # int64 indices: not at 2_1
    with tdo.feature_level("2_1"):
        with pytest.raises(tdo.ConstraintError, match="2_1"):
            _export(M(), args)
    _export(M(), args)                                    # permissive: exports


def test_opset_below_18_is_refused():
    with pytest.raises(tdo_onnx.OnnxExportError, match="opset 17"):
        tdo_onnx.translation_table(17)


def test_demo_agrees(capsys):
    from torch_dml_ops.onnx.__main__ import main
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["--demo"]) == 0
    out = capsys.readouterr().out
    assert out.count("agrees with eager") == 3 and "DIFFERS" not in out


def test_a_newer_opset_keeps_the_meaning():
    class M(torch.nn.Module):
        def forward(self, x, i, u):
            y = tdo.scatter_nd(x, i, u, reduction="max")
            return tdo.gather_nd(y, i), tdo.top_k1(y, 2)[1]

    args = (torch.randn(4, 5), torch.tensor([[1], [3], [1]]), torch.randn(3, 5))
    program = _check(M(), args, opset=20)
    assert [o.version for o in program.model_proto.opset_import if o.domain == ""] == [20]


# writes into views (torch_dml_ops/onnx/_views.py) ----------------------------------------------

from torch_dml_ops.onnx import _views  # noqa: E402

#: The section's own generator: its tests leave the global RNG as they found it.
_G = torch.Generator().manual_seed(41)

#: View chains over a [4, 3, 5, 6, 2] base (steps in the order a model applies them), each with
#: the tuple size k used on the view and whether the rewrite takes it (False: a row dimension
#: moves or shrinks, so the tuples do not address the base's whole rows).
_CHAINS = [
    ([("select", (0, 2))], 3, True),                                    # cache[l]
    ([("select", (1, -1))], 2, True),                                   # cache[:, -1]
    ([("slice", (0, 1, 4, 2))], 2, True),                               # cache[1:4:2]
    ([("narrow", (1, 1, 2)), ("select", (0, 3))], 2, True),
    ([("select", (0, 1)), ("slice", (1, None, None, 2)), ("transpose", (0, 1))], 2, True),
    ([("permute", (2, 0, 1, 3, 4)), ("select", (1, 0))], 2, True),
    ([("slice", (0, -3, None, 1)), ("select", (2, 4))], 2, True),       # the fixed dim after k
    ([("select", (0, 1))], 0, True),                                    # tuples of size 0
    ([("select", (0, 1))], 4, True),                                    # element tuples
    ([("select", (-1, 1))], 3, False),                                  # a row dimension fixed
    ([("slice", (3, 0, 4, 1))], 2, False),                              # a row dimension sliced
    ([("transpose", (2, 4))], 2, False),                                # a row dimension moved
    ([("permute", (0, 1, 2, 3, 4))], 0, False),                         # nothing to add
]


def _apply(x, steps):
    for kind, a in steps:
        if kind == "select":
            x = x.select(*a)
        elif kind == "slice":
            d, start, end, step = a
            x = x[(slice(None),) * (d % x.dim()) + (slice(start, end, step),)]
        elif kind == "narrow":
            x = x.narrow(*a)
        elif kind == "permute":
            x = x.permute(*a)
        else:
            x = x.transpose(*a)
    return x


@pytest.mark.parametrize("case", range(len(_CHAINS)))
def test_view_tuples_address_the_same_rows_of_the_base(case):
    """The oracle is eager itself: the base's tuples read and write exactly what the view's do,
    negative coordinates included (no export: _views.base_tuples is torch code)."""
    steps, k, taken = _CHAINS[case]
    g = torch.Generator().manual_seed(case)
    base = torch.randn(4, 3, 5, 6, 2, generator=g)
    view = _apply(base, steps)
    assert _views._plan(base.dim(), steps, k) == taken
    if not taken:
        return
    sizes = view.shape[:k]
    n = 7
    idx = torch.stack([torch.randint(-s, s, (n,), generator=g) for s in sizes], -1) if k else \
        torch.zeros(n, 0, dtype=torch.int64)
    mapped = _views.base_tuples(base, idx.to(torch.int32), steps)
    assert mapped.dtype == torch.int64 and mapped.shape[-1] == base.dim() - (view.dim() - k)
    if k:                                                 # gather_nd needs a tuple size >= 1
        assert torch.equal(tdo.gather_nd(base, mapped), tdo.gather_nd(view, idx))
    u = torch.randn((n,) + view.shape[k:], generator=g)
    want = base.clone()
    tdo.scatter_nd_(_apply(want, steps), idx, u, reduction="add")
    got = base.clone()
    tdo.scatter_nd_(got, mapped, u, reduction="add")
    assert torch.equal(got, want)


def test_writes_into_views_export_as_scatter_nd_on_the_base():
    """Per-layer writes (cache[l], unbind, cache[:, l], strided slices, a transposed view of
    tuple dimensions) and a gather from a view: no ScatterElements, consecutive writes into one
    tensor merged into one ScatterND, and equal to eager bit for bit with duplicates across and
    within calls (the later call wins, sums in call order)."""
    class M(torch.nn.Module):
        def forward(self, kc, vc, cc, pos, k, v):
            for layer in range(kc.shape[0]):
                tdo.scatter_nd_(kc[layer], pos, k[layer])
                tdo.scatter_nd_(vc[:, layer], pos, v[layer])
            for layer in cc:                               # unbind: the add writes merge
                tdo.scatter_nd_(layer, pos[:, 1:], k[0], reduction="add")
            tdo.scatter_nd_(cc[1:3].transpose(0, 1)[::2], torch.tensor([[0, -1, 2]]), v[1, :1],
                            reduction="add")
            seen = tdo.gather_nd(kc[1], -pos - 1)          # reads kc: writes after it stay apart
            tdo.scatter_nd_(kc[0], pos[:1], seen[:1] * 2)
            return kc, vc, cc, seen

    g = torch.Generator().manual_seed(3)
    L, B, H, P, D = 3, 2, 2, 5, 4
    kc, cc = torch.randn(L, B, H, P, D, generator=g), torch.randn(L, H, P, D, generator=g)
    vc = torch.randn(B, L, H, P, D, generator=g)
    pos = torch.tensor([[0, 1, 4], [1, 0, -1], [0, 1, 4]])           # a duplicate tuple
    k, v = torch.randn(L, 3, D, generator=g), torch.randn(L, 3, D, generator=g)
    program = _check(M(), (kc, vc, cc, pos, k, v))
    ops = [n.op_type for n in program.model_proto.graph.node]
    assert "ScatterElements" not in ops, ops
    # kc: the 3 layer writes as one, then the write after the read; vc: one; cc: the unbind's
    # add writes and the transposed view's add write as one.
    assert ops.count("ScatterND") == 4, ops


def test_a_write_between_reads_of_its_view_keeps_its_place():
    """A view taken before a write and read after it sees the write, a write after the read does
    not reach it: the merge must not move either write past the read."""
    class M(torch.nn.Module):
        def forward(self, c, u):
            row = c[0]
            tdo.scatter_nd_(c[0], torch.tensor([[1]]), u)
            seen = row * 2
            tdo.scatter_nd_(c[0], torch.tensor([[1]]), u + 1)
            tdo.scatter_nd_(c, torch.tensor([[0, 2]]), u - 1)
            return c, seen

    _check(M(), (torch.randn(2, 3, 4, generator=_G), torch.randn(1, 4, generator=_G)))


def test_an_index_out_of_a_sliced_view_stays_refused():
    """cache[2:4] has 2 positions: index 2 is out of range there though 4 is in the base."""
    class M(torch.nn.Module):
        def forward(self, c, i, u):
            tdo.scatter_nd_(c[2:4], i, u)
            return c

    args = (torch.zeros(6, 3), torch.tensor([[1]]), torch.ones(1, 3))
    program = _check(M(), args)
    assert "ScatterElements" not in _ops(program)
    with pytest.raises(IndexError):
        M()(args[0].clone(), torch.tensor([[2]]), args[2])
    session = ort.InferenceSession(program.model_proto.SerializeToString())
    for bad in (2, -3):
        with pytest.raises(Exception, match="(?i)invalid|out of|bound"):
            session.run(None, {"c": args[0].numpy(), "i": np.array([[bad]]),
                               "u": args[2].numpy()})


def test_views_benchmark_agrees(capsys):
    """``python -m torch_dml_ops.onnx --views`` at a toy size: every export agrees with eager,
    and only the view replay has ScatterElements."""
    from torch_dml_ops.onnx.__main__ import views
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert views(layers=3, heads=2, length=6, dim=4, repeat=1)
    lines = capsys.readouterr().out.splitlines()[1:]
    assert len(lines) == 4 and "DIFFERS" not in "".join(lines)
    assert "6 ScatterElements" in lines[0] and all("0 ScatterElements" in x for x in lines[1:])
    assert "2 ScatterND" in lines[1] and "2 ScatterND" in lines[2]


def test_writes_into_dynamic_slices_export_on_the_base():
    """Slices and narrows with symbolic bounds (a dynamic length): still ScatterND/GatherND on
    the base, at the export shape and another."""
    class M(torch.nn.Module):
        def forward(self, kc, pos, k, x):
            n = x.shape[0]
            for layer in range(kc.shape[0]):
                tdo.scatter_nd_(kc[layer, :, :n], pos, k[layer])
            return kc, tdo.gather_nd(kc[1].narrow(1, 1, n - 1), pos)

    def inputs(shape, n):
        g = torch.Generator().manual_seed(n)
        return (torch.randn(*shape, generator=g),
                torch.tensor([[0, 1], [shape[1] - 1, -1], [1, -2]]),
                torch.randn(2, 3, 4, generator=g), torch.zeros(n))

    dims = ({1: torch.export.Dim("B", min=2), 2: torch.export.Dim("P", min=3)},
            {0: torch.export.Dim("n")}, {1: torch.export.Dim("n")},
            {0: torch.export.Dim("S", min=3, max=6)})
    program = _export(M(), inputs((2, 3, 6, 4), 4), dynamic_shapes=dims)
    ops = [n.op_type for n in program.model_proto.graph.node]
    assert "ScatterElements" not in ops and ops.count("ScatterND") == 1, ops
    session = ort.InferenceSession(program.model_proto.SerializeToString())
    for shape, n in (((2, 3, 6, 4), 4), ((2, 5, 9, 4), 6)):
        a = inputs(shape, n)
        got = session.run(None, {s.name: t.numpy() for s, t in zip(session.get_inputs(), a)})
        want = M()(*[t.clone() for t in a])
        for gg, w in zip(got, want):
            _same(_tensor(gg), w, f"shape {shape}")


def test_a_write_does_not_move_past_a_change_of_its_updates():
    """The first write's updates change between the two writes (an in-place op, and a write
    into the tensor they are read from): merging would move the first write past the change."""
    class M(torch.nn.Module):
        def forward(self, c, d, u):
            tdo.scatter_nd_(c[0], torch.tensor([[1]]), u)
            u.mul_(3)
            tdo.scatter_nd_(c[1], torch.tensor([[2]]), u)
            tdo.scatter_nd_(c[0], torch.tensor([[0]]), d[0, :1])
            tdo.scatter_nd_(d, torch.tensor([[0, 1]]), u - 1)
            tdo.scatter_nd_(c[1], torch.tensor([[3]]), u + 1)
            return c, d, u

    args = (torch.randn(2, 4, 4, generator=_G), torch.randn(2, 3, 4, generator=_G),
            torch.randn(1, 4, generator=_G))
    program = _check(M(), args)
    assert "ScatterElements" not in _ops(program)


def test_consecutive_writes_of_tuple_size_0_stay_apart():
    """Tuples of size 0 (each update is the whole tensor) are left as written."""
    class M(torch.nn.Module):
        def forward(self, c, u):
            tdo.scatter_nd_(c, torch.zeros(2, 0, dtype=torch.int64), u, reduction="add")
            tdo.scatter_nd_(c, torch.zeros(1, 0, dtype=torch.int64), u[:1] * 2, reduction="add")
            return c

    _check(M(), (torch.randn(3, 2, generator=_G), torch.randn(2, 3, 2, generator=_G)))


@pytest.mark.parametrize("where", ["rewrite", "export"])
def test_a_failing_rewrite_falls_back_to_the_model_as_written(monkeypatch, where):
    """Should the rewrite fail (in itself, or the exporter on its program), the model exports as
    written, with a warning that says so."""
    def broken(*args, **kwargs):
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(_views, "writes_on_bases" if where == "rewrite" else "base_tuples",
                        broken)

    class M(torch.nn.Module):
        def forward(self, c, u):
            tdo.scatter_nd_(c[1], torch.tensor([[2]]), u)
            return c

    args = (torch.randn(2, 4, 3, generator=_G), torch.randn(1, 3, generator=_G))
    with pytest.warns(RuntimeWarning, match="rewrite of writes into views failed"):
        program = tdo_onnx.export(M(), args)
    got = _run(program, args)
    _same(got[0], M()(*[a.clone() for a in args]), "fallback")
    assert "ScatterElements" in _ops(program)          # torch's view replay


def test_updates_computed_from_the_target_before_the_writes_merge():
    """Updates computed from the target before the first write read it as it was then, merged or
    not: the writes merge and agree with eager."""
    class M(torch.nn.Module):
        def forward(self, c, u):
            twice = c[0, 1:2] * 2
            tdo.scatter_nd_(c, torch.tensor([[0, 1]]), u)
            tdo.scatter_nd_(c, torch.tensor([[1, 2]]), twice)
            return c

    program = _check(M(), (torch.randn(2, 3, 4, generator=_G), torch.randn(1, 4, generator=_G)))
    assert [n.op_type for n in program.model_proto.graph.node].count("ScatterND") == 1
