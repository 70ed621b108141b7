"""``python -m torch_dml_ops.bench.distributed``: the distributed top_k1 along a sharded axis
against replicate-then-top-k, on CPU ranks over gloo (spawned here).

Both take a DTensor sharded on the last axis: ours runs ``torch_dml_ops.top_k1`` on it (a local
top-k, one all-gather of k candidates per rank, a merge); the baseline redistributes it to
Replicate (an all-gather of the whole input) and runs ``top_k1`` on the full tensor.  Medians of
interleaved repeats, measured on rank 0, after a barrier each.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.tensor import DTensor, Replicate, Shard, init_device_mesh

import torch_dml_ops as tdo
from torch_dml_ops.distributed._placements import _chunk_bounds

CASES = ((8, 256000, 50), (32, 50257, 50))


def _worker(rank, world, path, repeats, queue):
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    mesh = init_device_mesh("cpu", (world,))
    rows = []
    for b, n, k in CASES:
        x = torch.randn(b, n, generator=torch.Generator().manual_seed(0))
        a, z = _chunk_bounds(n, world, rank)
        dx = DTensor.from_local(x[:, a:z].clone(), mesh, [Shard(1)], run_check=False,
                                shape=x.shape, stride=x.stride())

        def ours():
            return tdo.top_k1(dx, k)

        def replicate():
            return tdo.top_k1(dx.redistribute(mesh, [Replicate()]).to_local(), k)

        v1, i1 = ours()
        v2, i2 = replicate()
        assert torch.equal(v1.to_local(), v2) and torch.equal(i1.to_local(), i2)
        times = {"ours": [], "replicate": []}
        for _ in range(repeats):
            for name, fn in (("ours", ours), ("replicate", replicate)):
                dist.barrier()
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
        rows.append((f"{b}x{n} k={k}", statistics.median(times["ours"]),
                     statistics.median(times["replicate"])))
    if rank == 0:
        queue.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_dml_ops.bench.distributed",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=_worker, args=(r, args.ranks, os.path.join(tmp, "store"),
                                                   args.repeats, queue))
                 for r in range(args.ranks)]
        for p in procs:
            p.start()
        rows = queue.get(timeout=600)
        for p in procs:
            p.join()
    print(f"distributed top_k1 along the sharded axis, {args.ranks} CPU ranks (gloo), "
          f"1 thread each, medians of {args.repeats}; equal results checked first")
    print("| case | ours (local top-k + all-gather of k) | replicate, then top_k1 | ratio |")
    print("| --- | --- | --- | --- |")
    for name, ours, rep in rows:
        print(f"| {name} | {ours * 1e3:.2f} ms | {rep * 1e3:.2f} ms | {rep / ours:.1f}x faster |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
