"""``python -m torch_dml_ops.onnx --demo``: export a small decoder step to ONNX, run it in
onnxruntime, and check that it agrees with eager bit for bit.

The step writes the new token's key/value into a KV cache in place (``scatter_nd_`` on a
transposed view of the cache), reorders the beams (``gather_nd``), and picks the next tokens with
a stable top-k (``top_k1``).  The batch (beams) and the cache length are dynamic dimensions; the
exported model is run at the export shape and at two others.

``python -m torch_dml_ops.onnx --views``: time, in onnxruntime, a decode step's KV-cache writes into
per-layer views (``scatter_nd_(cache[l], ...)``) exported by torch's exporter as written (view
replay), by ``torch_dml_ops.onnx.export`` (ScatterND on the base, consecutive writes merged), as one
write with (layer, batch, head, position) tuples, and with a read of each layer between the writes.
"""
from __future__ import annotations

import argparse
import sys

import torch

import torch_dml_ops as tdo

from . import export


class DecoderStep(torch.nn.Module):
    def __init__(self, hidden: int = 16, vocab: int = 50, k: int = 4) -> None:
        super().__init__()
        # Small integers: every sum and product below is exact in float32, so onnxruntime's
        # matmuls (which add in another order than torch's) agree with eager bit for bit too, and
        # the logits have ties for top_k1's stable order to resolve.
        g = torch.Generator().manual_seed(0)
        self.wk = torch.nn.Parameter(torch.randint(-2, 3, (hidden, hidden), generator=g).float())
        self.wv = torch.nn.Parameter(torch.randint(-2, 3, (hidden, hidden), generator=g).float())
        self.head = torch.nn.Parameter(torch.randint(-2, 3, (hidden, vocab), generator=g).float())
        self.k = k

    def forward(self, x, cache, position, beam_order):
        # x: [beams, hidden]; cache: [2, hidden, beams, length] (stored transposed);
        # position: int64 [1]; beam_order: int64 [beams, 1].
        keys, values = x @ self.wk, x @ self.wv
        step = torch.stack([keys, values])                       # [2, beams, hidden]
        slots = position.expand(step.shape[1]).reshape(-1, 1)    # [beams, 1]
        # write the step into cache[:, :, b, position] through a transposed view: [2, beams, length, hidden]
        view = cache.permute(0, 2, 3, 1)
        for kv in range(2):
            tdo.scatter_nd_(view[kv], torch.cat([torch.arange(step.shape[1]).reshape(-1, 1),
                                                 slots], dim=1), step[kv])
        reordered = tdo.gather_nd(cache.permute(2, 0, 1, 3), beam_order)  # [beams, 2, hidden, length]
        context = reordered[:, 1].sum(dim=-1)                    # [beams, hidden]
        logits = (x + context) @ self.head
        scores, tokens = tdo.top_k1(logits, self.k)
        return scores, tokens, cache


def demo(verbose: bool = True) -> bool:
    import numpy as np
    import onnxruntime as ort

    hidden, beams, length = 16, 3, 7
    model = DecoderStep(hidden).eval()

    def inputs(beams, length, seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(-3, 4, (beams, hidden), generator=g).float()
        cache = torch.randint(-3, 4, (2, hidden, beams, length), generator=g).float()
        position = torch.tensor([length // 2])
        order = torch.randint(0, beams, (beams, 1), generator=g)
        return x, cache, position, order

    beams_dim, length_dim = torch.export.Dim("beams", min=2), torch.export.Dim("length", min=2)
    dynamic = ({0: beams_dim}, {2: beams_dim, 3: length_dim}, None, {0: beams_dim})
    program = export(model, inputs(beams, length, 0), dynamic_shapes=dynamic)
    session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    ok = True
    for shape in ((beams, length), (5, 11), (2, 4)):
        args = inputs(*shape, seed=sum(shape))
        feeds = {n: a.numpy() for n, a in zip(names, args)}
        got = session.run(None, feeds)
        with torch.no_grad():
            want = model(*[a.clone() for a in args])
        agree = len(got) == len(want) and all(
            np.array_equal(g, w.numpy()) for g, w in zip(got, want))
        ok &= agree
        if verbose:
            print(f"beams={shape[0]} length={shape[1]}: onnxruntime "
                  f"{'agrees with' if agree else 'DIFFERS FROM'} eager (scores, tokens, KV cache)")
    if verbose:
        print("ONNX nodes:", sorted({n.op_type for n in program.model_proto.graph.node}
                                   & {"GatherND", "ScatterND", "TopK"}))
    return ok


def _cache_writes(layers: int, heads: int, read_between: bool) -> torch.nn.Module:
    class Step(torch.nn.Module):
        def forward(self, kc, vc, pos, k, v):
            tuples = torch.stack([torch.zeros(heads, dtype=torch.int64), torch.arange(heads),
                                  pos.expand(heads)], -1)                 # (batch, head, pos)
            seen = []
            for layer in range(layers):
                tdo.scatter_nd_(kc[layer], tuples, k[layer])
                tdo.scatter_nd_(vc[layer], tuples, v[layer])
                if read_between:
                    seen.append(tdo.gather_nd(kc[layer], tuples))
            return (kc, vc) + ((torch.stack(seen),) if read_between else ())
    return Step()


def _one_write(layers: int, heads: int, dim: int) -> torch.nn.Module:
    class Step(torch.nn.Module):
        def forward(self, kc, vc, pos, k, v):
            n = layers * heads
            tuples = torch.stack([torch.arange(layers).repeat_interleave(heads),
                                  torch.zeros(n, dtype=torch.int64),
                                  torch.arange(heads).repeat(layers),
                                  pos.expand(n)], -1)             # (layer, batch, head, pos)
            tdo.scatter_nd_(kc, tuples, k.reshape(n, dim))
            tdo.scatter_nd_(vc, tuples, v.reshape(n, dim))
            return kc, vc
    return Step()


def views(layers: int = 32, heads: int = 8, length: int = 256, dim: int = 128,
          repeat: int = 15, verbose: bool = True) -> bool:
    """Median onnxruntime time per step of each export (see the module's docstring); returns
    whether every export agrees with eager bit for bit."""
    import statistics
    import time
    import warnings

    import numpy as np
    import onnxruntime as ort

    from . import exporting, translation_table
    g = torch.Generator().manual_seed(0)
    args = (torch.randn(layers, 1, heads, length, dim, generator=g),
            torch.randn(layers, 1, heads, length, dim, generator=g),
            torch.tensor([length // 3]), torch.randn(layers, heads, dim, generator=g),
            torch.randn(layers, heads, dim, generator=g))

    def torch_exporter(model):
        with exporting():
            return torch.onnx.export(model, args, dynamo=True, verbose=False,
                                     custom_translation_table=translation_table())

    cases = [("per-layer views, torch's exporter (view replay)",
              _cache_writes(layers, heads, False), torch_exporter),
             ("per-layer views, torch_dml_ops.onnx.export",
              _cache_writes(layers, heads, False), lambda m: export(m, args)),
             ("one write, (layer, batch, head, pos) tuples",
              _one_write(layers, heads, dim), lambda m: export(m, args)),
             ("per-layer views, a read of each layer between writes",
              _cache_writes(layers, heads, True), lambda m: export(m, args))]
    ok = True
    if verbose:
        mib = args[0].numel() * 4 / 2**20
        print(f"{layers} layers, 2 caches of {mib:.0f} MiB, {heads} heads, onnxruntime "
              f"{ort.__version__}, median of {repeat} steps")
    for name, model, make in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = make(model)
        session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
        got = session.run(None, feeds)
        with torch.no_grad():
            want = model(*[a.clone() for a in args])
        agree = len(got) == len(want) and all(
            np.array_equal(x, w.numpy()) for x, w in zip(got, want))
        ok &= agree
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            session.run(None, feeds)
            times.append(time.perf_counter() - t0)
        nodes = [n.op_type for n in program.model_proto.graph.node]
        if verbose:
            print(f"  {name}: {statistics.median(times) * 1e3:.2f} ms, "
                  f"{nodes.count('ScatterND')} ScatterND, "
                  f"{nodes.count('ScatterElements')} ScatterElements"
                  f"{'' if agree else ', DIFFERS FROM eager'}")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_dml_ops.onnx", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", action="store_true",
                        help="export the decoder-step example and compare onnxruntime with eager")
    parser.add_argument("--views", action="store_true",
                        help="time a decode step's KV-cache writes into views in onnxruntime, "
                             "exported four ways")
    args = parser.parse_args(argv)
    if not (args.demo or args.views):
        parser.print_help()
        return 0
    ok = True
    if args.demo:
        ok &= demo()
    if args.views:
        ok &= views()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
