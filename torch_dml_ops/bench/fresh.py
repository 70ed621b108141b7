"""Fresh outputs: every single call against its median, for calls whose result is new memory.

``python -m torch_dml_ops.bench.fresh [--processes 6] [--rounds 50] [--threads 2] [--case TEXT]``

A large result is fresh memory on every call (torch's CPU allocator hands a freed block of that
size back to the system), so each call pays the first touch of its pages, and where a process
asks for transparent huge pages, a wait for the kernel to find them: single calls, not the
median, show that.  Each case runs in processes of its own (a new process is where the first
calls stall): two warm-up rounds, then ``--rounds`` rounds, each calling ours, torch's best
formulation and the floor (``torch.empty(n).fill_(0)`` of the result's size: the first touch of
fresh memory alone) once, in an order rotated every round, each result dropped before the
next call.  Per process: the median of each, ours ÷ torch's median, and each one's worst call
÷ its median; then the range over the processes.  The issue's bar (issue 41, item 5): no
single call of ours over 2.5x its median, and our median at least level with torch's.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Tuple

import torch

import torch_dml_ops as tdo

from . import cases as c

#: How the usage names this entry point.
PROG = "python -m torch_dml_ops.bench.fresh"


def _cases() -> Dict[str, Callable[[], Dict[str, Callable[[], object]]]]:
    """Case name -> a builder of its three calls (ours, torch, floor), inputs made once."""

    def scatter():
        d = c.scatter_inputs((4096, 4096), 1_000_000, 2)(0)
        numel = d["x"].numel()
        return {
            "ours": lambda: tdo.scatter_nd(d["x"], d["idx"], d["upd"]),
            "torch": lambda: c._rows(d["x"].clone(), d).index_copy_(
                0, c._lin(d), c._s_upd_rows(d)).view(d["x"].shape),
            "floor": lambda: torch.empty(numel).fill_(0),
        }

    def gather():
        d = c.gather_inputs((100_000, 256), 65_536, 1)(0)
        numel = math.prod(d["out_shape"])
        return {
            "ours": lambda: tdo.gather_nd(d["x"], d["idx"]),
            "torch": lambda: c._g_index_select(d),
            "floor": lambda: torch.empty(numel).fill_(0),
        }

    return {
        "functional element scatter 4096x4096, 1M tuples (torch: clone + flat index_copy_)":
            scatter,
        "fresh row gather 100000x256, 64K rows (torch: index_select)": gather,
    }


def run_one(name: str, rounds: int) -> Dict[str, List[float]]:
    """The seconds of every timed call of case ``name`` in this process, per provider."""
    fns = _cases()[name]()
    names = list(fns)
    times: Dict[str, List[float]] = {p: [] for p in names}
    for r in range(rounds + 2):
        for p in names[r % 3:] + names[:r % 3]:
            t0 = time.perf_counter()
            res = fns[p]()
            dt = time.perf_counter() - t0
            del res
            if r >= 2:
                times[p].append(dt)
    return times


def summary(times: Dict[str, List[float]]) -> Dict[str, float]:
    med = {p: statistics.median(v) for p, v in times.items()}
    out = {f"{p}_ms": m * 1e3 for p, m in med.items()}
    out.update({f"{p}_worst": max(times[p]) / med[p] for p in times})
    out["ratio"] = med["ours"] / med["torch"]
    return out


def _span(rows: List[Dict[str, float]], key: str, fmt: str) -> str:
    lo, hi = min(r[key] for r in rows), max(r[key] for r in rows)
    return format(lo, fmt) if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}-{hi:{fmt}}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--case", default="", help="only cases whose name contains TEXT")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)   # a child process's case
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.one is not None:
        print(json.dumps(run_one(args.one, args.rounds)))
        return 0
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.processes} processes of "
          f"{args.rounds} rounds after 2 warm-ups; medians; worst = a process's slowest call ÷ "
          f"its median")
    print("| case | ours, median | torch, median | ours ÷ torch | worst ÷ median "
          "(ours / torch / floor) | each process's ours ÷ torch |\n"
          "| --- | --- | --- | --- | --- | --- |")
    for name in (n for n in _cases() if args.case in n):
        rows: List[Dict[str, float]] = []
        for _ in range(args.processes):
            res = subprocess.run(
                [sys.executable, "-m", "torch_dml_ops.bench.fresh", "--one", name,
                 "--rounds", str(args.rounds), "--threads", str(args.threads)],
                capture_output=True, text=True)
            if res.returncode != 0:
                sys.stderr.write(res.stderr)
                raise SystemExit(f"{PROG}: the process timing {name!r} failed "
                                 f"(exit {res.returncode})")
            rows.append(summary(json.loads(res.stdout.strip().splitlines()[-1])))
        worst: Tuple[str, ...] = tuple(_span(rows, f"{p}_worst", ".2f")
                                       for p in ("ours", "torch", "floor"))
        each = ", ".join(f"{r['ratio']:.3f}" for r in rows)
        print(f"| {name} | {_span(rows, 'ours_ms', '.1f')} ms | {_span(rows, 'torch_ms', '.1f')} "
              f"ms | {_span(rows, 'ratio', '.2f')}, median {statistics.median(r['ratio'] for r in rows):.3f} "
              f"| {' / '.join(worst)} | {each} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
