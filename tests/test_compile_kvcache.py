"""The KV-cache pattern under ``torch.compile(dynamic=True)`` with Inductor: writes into one
layer of a stacked ``[layers, T, d]`` cache (a view with a storage offset), compared bit for bit
with eager.

Inductor lowered the view's storage offset to 0 under dynamic shapes, so every layer's write
landed in layer 0 (docs/upstream-inductor-view-offset.md): these tests write into every layer,
layer 0 included, at growing positions, into a cache of fixed length and into one that grows.

Costs: one Inductor compile per test (dynamic shapes: no recompile as the sizes change).  The
compiler's caches are off here: a graph compiled before a fix would otherwise be reused.
"""
import pytest
import torch

import torch_dml_ops as tdo

pytestmark = pytest.mark.compile

LAYERS, D = 3, 4


@pytest.fixture(autouse=True)
def _fresh_compiles():
    torch._dynamo.reset()
    with torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        yield
    torch._dynamo.reset()


def _kv(step, n=1):
    """Per-layer keys for ``n`` tokens at decode step ``step`` (distinct per layer and step)."""
    return (torch.arange(LAYERS * n * D, dtype=torch.float32).reshape(LAYERS, n, D)
            + 100 * step + 0.5)


def _decode(cache, pos, kv):
    """One decode step of a GPT-style model: every layer writes its new keys in place."""
    for layer in range(LAYERS):
        tdo.scatter_nd_(cache[layer], pos, kv[layer])
    return cache


def test_scatter_nd_inplace_into_layers_of_a_stacked_cache():
    compiled = torch.compile(_decode, fullgraph=True, dynamic=True)
    # A cache of fixed length written at growing positions.
    T = 6
    got, want = torch.zeros(LAYERS, T, D), torch.zeros(LAYERS, T, D)
    for step in range(T):
        pos = torch.tensor([[step]])
        out = compiled(got, pos, _kv(step))
        _decode(want, pos, _kv(step))
        assert out is got
        assert torch.equal(got, want), f"step {step}: layers written {got.abs().sum((1, 2))}"
    # A cache that grows by one slot per step (every size changes), the new slot written.
    got, want = torch.zeros(LAYERS, 2, D), torch.zeros(LAYERS, 2, D)
    for step in range(4):
        got = torch.cat([got, torch.zeros(LAYERS, 1, D)], dim=1)
        want = torch.cat([want, torch.zeros(LAYERS, 1, D)], dim=1)
        pos = torch.tensor([[got.shape[1] - 1]])
        compiled(got, pos, _kv(step))
        _decode(want, pos, _kv(step))
        assert torch.equal(got, want), f"length {got.shape[1]}"


def _out_overloads(keys, vals, pos, kv, src, rows):
    """The out= overloads writing into layers of stacked buffers."""
    for layer in range(LAYERS):
        tdo.scatter_nd(src[layer], pos, kv[layer], out=keys[layer])
        tdo.gather_nd(src[layer], rows, out=vals[layer])
    return keys, vals


def test_out_overloads_into_layers_of_stacked_buffers():
    compiled = torch.compile(_out_overloads, fullgraph=True, dynamic=True)
    for T in (5, 7):
        src = torch.arange(LAYERS * T * D, dtype=torch.float32).reshape(LAYERS, T, D)
        pos, rows = torch.tensor([[T - 2]]), torch.tensor([[T - 1], [0]])
        got = torch.zeros(LAYERS, T, D), torch.zeros(LAYERS, 2, D)
        want = torch.zeros(LAYERS, T, D), torch.zeros(LAYERS, 2, D)
        compiled(*got, pos, _kv(T), src, rows)
        _out_overloads(*want, pos, _kv(T), src, rows)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), f"T={T}"


def test_permuted_cache_write_and_read_compiled_equal_eager():
    """transformers' layout [batch, heads, positions, dim] written and read through the
    permuted view (tests/test_strided_views.py for eager), compiled."""
    def step(keys, pos, k):
        tdo.scatter_nd_(keys.permute(2, 0, 1, 3), pos[:, None], k.permute(2, 0, 1, 3))
        return tdo.gather_nd(keys.permute(2, 0, 1, 3), pos[:, None]) * 2
    compiled = torch.compile(step, fullgraph=True)
    keys = torch.randn(2, 3, 16, 4)
    eager_keys = keys.clone()
    for p in (0, 7, 15):
        pos, k = torch.tensor([p]), torch.randn(2, 3, 1, 4)
        want = step(eager_keys, pos, k)
        assert torch.equal(compiled(keys, pos, k), want)
        assert torch.equal(keys, eager_keys)


def _chain(e):
    out = []
    while e is not None and len(out) < 20:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def test_what_a_caller_catches_under_compile():
    """docs/api.md, "Errors under compile": an out-of-range index raised while the compiled
    graph runs is ours, unchanged; a refusal found while tracing is ours or torch's wrapper
    with ours (or, torch 2.15 with fullgraph, dynamo's copy of ours) in its chain."""
    x = torch.randn(4, 3)
    gather = torch.compile(lambda a, i: tdo.gather_nd(a, i) * 2, fullgraph=True)
    with pytest.raises(IndexError, match=r"gather_nd: .*value 7"):
        gather(x, torch.tensor([[7]]))
    for fullgraph in (False, True):
        torch._dynamo.reset()
        refused = torch.compile(
            lambda a: tdo.gather_nd(a, torch.tensor([[1]], dtype=torch.int8)) * 2,
            fullgraph=fullgraph)
        with pytest.raises(Exception) as info:
            refused(x)
        chain = _chain(info.value)
        ours = [e for e in chain if isinstance(e, tdo.ConstraintTypeError)
                or type(e).__name__ == "ObservedConstraintTypeErrorError"]
        assert ours, [type(e) for e in chain]
        assert "IndicesTensor has dtype torch.int8" in str(ours[0])
