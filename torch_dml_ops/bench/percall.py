"""Per-call cost of small calls against torch's closest builtins, measured the same way.

``python -m torch_dml_ops.bench.percall [--threads 1] [--rounds 15] [--no-compile] [--bound]``

Each row times one way of making a small call (eagerly, through ``torch.ops``, inside a
``torch.compile``d function, with an input that requires grad) for our op and for torch's
builtin, in one process: blocks of calls, interleaved, medians of the blocks; the table gives
the ratio to the builtin measured the same way.

``--bound`` adds what a C++ Autograd kernel could give at best (which torch's stable ABI cannot
build: it has no autograd API, not even a ``requires_grad`` getter): the gather rows again with
the op's Python Autograd kernel replaced, for the measurement only, by a fallthrough (no
autograd at all; removed afterwards).
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import warnings
from typing import Callable, Dict, List, Tuple

import torch

import torch_dml_ops as tdo
from torch_dml_ops._compat import drop_library

OPS = torch.ops.torch_dml_ops


def _block(fn: Callable[[], object], number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def time_interleaved(fns: Dict[str, Callable[[], object]], rounds: int,
                     block_s: float = 0.02) -> Dict[str, float]:
    """Median seconds per call of each function: calibrated blocks, interleaved, rotated."""
    number = {}
    for name, fn in fns.items():
        for _ in range(200):
            fn()
        n = 16
        while _block(fn, n) * n < block_s / 4:
            n *= 4
        number[name] = max(1, round(n * block_s / (_block(fn, n) * n)))
    samples: Dict[str, List[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(_block(fns[name], number[name]))
    return {name: statistics.median(v) for name, v in samples.items()}


def cases(compile_: bool) -> List[Tuple[str, Dict[str, Callable[[], object]], List[Tuple[str, str]]]]:
    """(title, {label: fn}, [(ours, builtin)] pairs to report)."""
    out = []
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 64, generator=g)
    idx = torch.randint(0, 64, (128,), generator=g)
    idx2 = idx.unsqueeze(1)
    fns = {
        "tdo.gather_nd": lambda: tdo.gather_nd(x, idx2),
        "torch.ops gather_nd": lambda: OPS.gather_nd.default(x, idx2),
        "index_select": lambda: torch.index_select(x, 0, idx),
        "x[idx]": lambda: x[idx],
        "torch.ops index_select": lambda: torch.ops.aten.index_select.default(x, 0, idx),
    }
    pairs = [("tdo.gather_nd", "index_select"), ("torch.ops gather_nd", "torch.ops index_select")]
    if compile_:
        cg = torch.compile(lambda a, i: tdo.gather_nd(a, i), fullgraph=True)
        cb = torch.compile(lambda a, i: torch.index_select(a, 0, i), fullgraph=True)
        fns["compiled gather_nd"] = lambda: cg(x, idx2)
        fns["compiled index_select"] = lambda: cb(x, idx)
        pairs.append(("compiled gather_nd", "compiled index_select"))
    out.append(("gather 128 rows from 64x64 float32", fns, pairs))

    xg = x.clone().requires_grad_()
    out.append(("the same, input requires grad (forward, recorded)", {
        "tdo.gather_nd": lambda: tdo.gather_nd(xg, idx2),
        "index_select": lambda: torch.index_select(xg, 0, idx),
        "torch.ops gather_nd": lambda: OPS.gather_nd.default(xg, idx2),
        "torch.ops index_select": lambda: torch.ops.aten.index_select.default(xg, 0, idx),
    }, [("tdo.gather_nd", "index_select"), ("torch.ops gather_nd", "torch.ops index_select")]))

    cache = torch.randn(256, 128, generator=g)
    row = torch.randn(1, 128, generator=g)
    at = torch.tensor([[7]])
    at1 = torch.tensor([7])
    fns = {
        "tdo.scatter_nd_": lambda: tdo.scatter_nd_(cache, at, row),
        "torch.ops scatter_nd_": lambda: OPS.scatter_nd_.default(cache, at, row),
        "index_copy_": lambda: cache.index_copy_(0, at1, row),
        "torch.ops index_copy_": lambda: torch.ops.aten.index_copy_.default(cache, 0, at1, row),
    }
    pairs = [("tdo.scatter_nd_", "index_copy_"), ("torch.ops scatter_nd_", "torch.ops index_copy_")]
    if compile_:
        cs = torch.compile(lambda c, i, u: tdo.scatter_nd_(c, i, u), fullgraph=True)
        cc = torch.compile(lambda c, i, u: c.index_copy_(0, i, u), fullgraph=True)
        fns["compiled scatter_nd_"] = lambda: cs(cache, at, row)
        fns["compiled index_copy_"] = lambda: cc(cache, at1, row)
        pairs.append(("compiled scatter_nd_", "compiled index_copy_"))
    out.append(("scatter_nd_ of one row into a 256x128 float32 cache", fns, pairs))

    cg_ = cache.clone().requires_grad_()
    rg = row.clone().requires_grad_()
    out.append(("scatter_nd of one row into 256x128, inputs require grad (recorded)", {
        "tdo.scatter_nd": lambda: tdo.scatter_nd(cg_, at, rg),
        "index_copy": lambda: cg_.index_copy(0, at1, rg),
    }, [("tdo.scatter_nd", "index_copy")]))

    # transformers' KV cache [batch, heads, positions, dim] seen as [positions, batch, heads, dim]
    # (its StaticLayer.update: index_copy_(2, pos, k)): a strided target and input, whose calls
    # move the addressed position only
    for shape in ((1, 8, 4096, 128), (4, 32, 2048, 128)):
        keys = torch.randn(shape, generator=g)
        k = torch.randn(shape[0], shape[1], 1, shape[3], generator=g)
        out.append((f"one position of a permuted {list(shape)} float32 KV cache",
                    _kv_cache_fns(keys, k, at, at1),
                    [("tdo.scatter_nd_", "index_copy_"),
                     ("torch.ops scatter_nd_", "torch.ops index_copy_"),
                     ("tdo.gather_nd", "index_select")]))

    logits = torch.randn(1, 50257, generator=g)
    out.append(("top-k 50 of 50257 (one row)", {
        "tdo.top_k1": lambda: tdo.top_k1(logits, 50),
        "torch.ops top_k1": lambda: OPS.top_k1.default(logits, 50),
        "torch.topk": lambda: torch.topk(logits, 50),
        "torch.ops topk": lambda: torch.ops.aten.topk.default(logits, 50),
    }, [("tdo.top_k1", "torch.topk"), ("torch.ops top_k1", "torch.ops topk")]))
    lg = logits.clone().requires_grad_()
    out.append(("the same, input requires grad (recorded)", {
        "tdo.top_k1": lambda: tdo.top_k1(lg, 50),
        "torch.topk": lambda: torch.topk(lg, 50),
    }, [("tdo.top_k1", "torch.topk")]))
    return out


def _kv_cache_fns(keys: torch.Tensor, k: torch.Tensor, at: torch.Tensor,
                  at1: torch.Tensor) -> Dict[str, Callable[[], object]]:
    """The permuted-cache write and read (ours through the view, torch's on the cache)."""
    kp, kpu = keys.permute(2, 0, 1, 3), k.permute(2, 0, 1, 3)
    return {
        "tdo.scatter_nd_": lambda: tdo.scatter_nd_(kp, at, kpu),
        "torch.ops scatter_nd_": lambda: OPS.scatter_nd_.default(kp, at, kpu),
        "index_copy_": lambda: keys.index_copy_(2, at1, k),
        "torch.ops index_copy_": lambda: torch.ops.aten.index_copy_.default(keys, 2, at1, k),
        "tdo.gather_nd": lambda: tdo.gather_nd(kp, at),
        "index_select": lambda: keys.index_select(2, at1),
    }


def bound_cases(compile_: bool):
    """The gather rows through ``torch.ops`` and compiled, with the op's Autograd kernel a
    fallthrough while they run (``--bound``): a context manager and the cases."""
    @contextlib.contextmanager
    def fallthrough():
        lib = torch.library.Library("torch_dml_ops", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # "overriding a previously registered kernel"
            lib.impl("gather_nd", torch.library.fallthrough_kernel, "Autograd",
                     allow_override=True)       # said explicitly: False before torch 2.13
        try:
            yield
        finally:
            drop_library(lib)                   # the Python Autograd kernel is back

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 64, generator=g)
    idx = torch.randint(0, 64, (128,), generator=g)
    idx2 = idx.unsqueeze(1)
    fns = {
        "torch.ops gather_nd": lambda: OPS.gather_nd.default(x, idx2),
        "torch.ops index_select": lambda: torch.ops.aten.index_select.default(x, 0, idx),
    }
    pairs = [("torch.ops gather_nd", "torch.ops index_select")]
    if compile_:
        cg = torch.compile(lambda a, i: OPS.gather_nd.default(a, i), fullgraph=True)
        cb = torch.compile(lambda a, i: torch.index_select(a, 0, i), fullgraph=True)
        fns["compiled gather_nd"] = lambda: cg(x, idx2)
        fns["compiled index_select"] = lambda: cb(x, idx)
        pairs.append(("compiled gather_nd", "compiled index_select"))
    return fallthrough, [("bound: gather 128 rows, no Python Autograd kernel", fns, pairs)]


#: How the usage names this entry point.
PROG = "python -m torch_dml_ops.bench.percall"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--bound", action="store_true",
                    help="also the rows a C++ Autograd kernel could give at best")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), backend {tdo.current_backend()}, "
          f"medians of {args.rounds} interleaved blocks")
    print("| call | ours (us) | builtin | builtin (us) | ratio |\n| --- | --- | --- | --- | --- |")
    for title, fns, pairs in cases(not args.no_compile):
        _report(title, fns, pairs, args.rounds)
    if args.bound:
        fallthrough, bound = bound_cases(not args.no_compile)
        with fallthrough():
            for title, fns, pairs in bound:
                _report(title, fns, pairs, args.rounds)
    return 0


def _report(title, fns, pairs, rounds) -> None:
    med = time_interleaved(fns, rounds)
    for ours, builtin in pairs:
        print(f"| {title}: {ours} | {med[ours] * 1e6:.2f} | {builtin} | "
              f"{med[builtin] * 1e6:.2f} | {med[ours] / med[builtin]:.2f} |")


if __name__ == "__main__":
    raise SystemExit(main())
