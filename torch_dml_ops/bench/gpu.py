"""The GPU numbers of docs/benchmarks.md: ``python -m torch_dml_ops.bench.gpu`` (CUDA needed).

Two measures, each against torch's own CUDA op for the same work:

* **device time**: 20 calls captured in a CUDA graph and replayed (medians of 15 replays), so the
  host's cost is out; ``check_indices=False`` (a checked call reads a flag on the host, which a
  graph cannot hold); GB/s counts the bytes a call must move (indices, reads, writes);
* **host time**: wall time per call of back-to-back calls of a small problem, synchronised once
  at the end, with the launch cache (``triton_kernels._common.launch``) and without it (every
  launch through triton's JIT).

Without a CUDA device it says so and exits 0.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

import torch_dml_ops as tdo


def device_us(f, calls: int = 20, reps: int = 15) -> float:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            f()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000 / calls)
    return statistics.median(times)


def host_us(f, n: int = 3000) -> float:
    for _ in range(50):
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        times.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


class _NoLaunchCache(dict):
    """Stands in for the launch cache: every launch goes through triton's JIT."""

    def get(self, key, default=None):
        return None


def device_cases():
    d = "cuda"
    x = torch.randn(4096, 4096, device=d)
    i = torch.randint(0, 4096, (1 << 20, 2), device=d)
    lin, xf = i[:, 0] * 4096 + i[:, 1], x.view(-1)
    t = torch.randn(100000, 256, device=d)
    r = torch.randint(0, 100000, (65536, 1), device=d)
    tb = t.to(torch.bfloat16)
    u = torch.randn(65536, 256, device=d)
    cache = t.clone()
    ru = torch.randperm(100000, device=d)[:65536].view(-1, 1)
    kv = torch.zeros(4096, 8, 128, device=d)
    pos, new = torch.tensor([[17]], device=d), torch.randn(1, 8, 128, device=d)
    yield ("gather_nd element 4096x4096 K=2 n=1M", lambda: tdo.gather_nd(x, i, check_indices=False),
           "take", lambda: xf.take(lin), (1 << 20) * (16 + 4 + 4))
    yield ("gather_nd rows 100000x256 f32 n=64K", lambda: tdo.gather_nd(t, r, check_indices=False),
           "index_select", lambda: t.index_select(0, r.view(-1)), 65536 * (8 + 2 * 1024))
    yield ("gather_nd rows 100000x256 bf16 n=64K",
           lambda: tdo.gather_nd(tb, r, check_indices=False),
           "index_select", lambda: tb.index_select(0, r.view(-1)), 65536 * (8 + 2 * 512))
    yield ("scatter_nd_ rows 100000x256 n=64K unique",
           lambda: tdo.scatter_nd_(cache, ru, u, check_indices=False),
           "index_copy_", lambda: cache.index_copy_(0, ru.view(-1), u), 65536 * (8 + 2 * 1024))
    yield ("scatter_nd_ add rows n=64K (atomics)",
           lambda: tdo.scatter_nd_(cache, r, u, "add", check_indices=False),
           "index_add_", lambda: cache.index_add_(0, r.view(-1), u), 65536 * (8 + 3 * 1024))
    yield ("scatter_nd_ KV cache, 1 row of 8x128",
           lambda: tdo.scatter_nd_(kv, pos, new, check_indices=False),
           "index_copy_", lambda: kv.index_copy_(0, pos.view(-1), new), 2 * 4096)
    for shape, k in (((4096, 1024), 8), ((4096, 1024), 1), ((32, 50257), 50), ((1, 1000000), 10),
                     ((16384, 256), 256), ((1024, 4096), 256), ((1, 4194304), 256)):
        lg = torch.randn(shape, device=d)
        yield (f"top_k1 {shape[0]}x{shape[1]} k={k}", lambda lg=lg, k=k: tdo.top_k1(lg, k),
               "topk", lambda lg=lg, k=k: torch.topk(lg, k), lg.numel() * 4)


def host_cases():
    d = "cuda"
    x = torch.randn(1000, 64, device=d)
    i = torch.randint(0, 1000, (1, 1), device=d)
    u, cache = torch.randn(1, 64, device=d), x.clone()
    lg = torch.randn(1, 50257, device=d)
    i1 = i.view(-1)
    yield ("gather_nd 1 row, check_indices=False", lambda: tdo.gather_nd(x, i, check_indices=False),
           "index_select", lambda: x.index_select(0, i1))
    yield ("gather_nd 1 row, checked", lambda: tdo.gather_nd(x, i), "x[i]", lambda: x[i1])
    yield ("scatter_nd_ 1 row, check_indices=False",
           lambda: tdo.scatter_nd_(cache, i, u, check_indices=False),
           "index_copy_", lambda: cache.index_copy_(0, i1, u))
    yield ("scatter_nd_ 1 row, checked", lambda: tdo.scatter_nd_(cache, i, u),
           "index_put_", lambda: cache.index_put_((i1,), u))
    yield ("top_k1 1x50257 k=50", lambda: tdo.top_k1(lg, 50), "topk", lambda: torch.topk(lg, 50))


#: How the usage names this entry point.
PROG = "python -m torch_dml_ops.bench.gpu"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 0
    from torch_dml_ops.triton_kernels import _common
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = []
    print("device time per call (CUDA graph replay, check_indices=False)")
    for name, ours, ref_name, ref, nbytes in device_cases():
        o, r = device_us(ours), device_us(ref)
        rows.append(dict(kind="device", case=name, ours_us=round(o, 1), torch=ref_name,
                         torch_us=round(r, 1), ours_GBs=round(nbytes / o / 1e3)))
        print(f"  {name:44s} ours {o:8.1f} us ({nbytes / o / 1e3:5.0f} GB/s)  "
              f"torch {ref_name} {r:8.1f} us")
    print("host time per call")
    for name, ours, ref_name, ref in host_cases():
        cached = host_us(ours)
        saved, _common._COMPILED = _common._COMPILED, _NoLaunchCache()
        try:
            jit = host_us(ours)
        finally:
            _common._COMPILED = saved
        r = host_us(ref)
        rows.append(dict(kind="host", case=name, ours_us=round(cached, 1),
                         ours_without_launch_cache_us=round(jit, 1), torch=ref_name,
                         torch_us=round(r, 1)))
        print(f"  {name:42s} ours {cached:6.1f} us (through the JIT {jit:6.1f})  "
              f"torch {ref_name} {r:6.1f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
