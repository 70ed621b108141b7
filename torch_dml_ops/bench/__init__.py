"""Benchmarks: torch_dml_ops against torch-native formulations and against other libraries.

Run::

    python -m torch_dml_ops.bench                    # every op: named cases + scaling series
    python -m torch_dml_ops.bench --quick            # a shorter run (under two minutes here)
    python -m torch_dml_ops.bench gather_nd top_k1   # some ops
    python -m torch_dml_ops.bench --case 4096        # only cases whose name contains "4096"
    python -m torch_dml_ops.bench --json r.json --plot r.png --markdown r.md

The peers (onnxruntime, TensorFlow, JAX) join when they are installed (``pip install -e
".[bench]"``); ``--peers none`` leaves them out, ``--peers jax,onnxruntime`` picks some.  The plot
needs matplotlib (in the same extra).

Per case: build the inputs once (seeded), run every provider once and check its result against
ours (bit-exact; a top-k provider whose values are exact but whose tie order differs is marked,
and still timed; one that disagrees otherwise is reported and not timed), warm up, then time all
providers *interleaved* in one process: ``repeats`` rounds, each round running one block of
``number`` calls of every provider (``number`` calibrated so that a block lasts about
``block_ms``).  A row reports the median per-call time over the rounds, the spread (IQR, min and
max), the ratio to the fastest other provider (torch-native or peer), and the ratio to the
copy-bandwidth limit: the bytes an ideal implementation moves (read + written, see each case's
``ideal_bytes``) divided by the bandwidth of ``dst.copy_(src)`` measured at the start of the run.

On a machine with a CUDA GPU the cases run on it, ours once per backend (``[triton]`` and
``[portable]``), against the torch formulations (the peers run on the CPU only, so they are left
out there).  Without one, the portable path runs on the CPU.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import time
from typing import List, Optional, Sequence

import torch

import torch_dml_ops as tdo

from .._library import extension_loaded
from . import cases as _cases
from . import peers as _peers
from . import report as _report
from .core import QUICK, TIE_ORDER, Bandwidth, Case, Provider, Row, Settings, measure_bandwidth, \
    run_case

__all__ = ["main", "Case", "Provider", "Row", "Settings", "run_case", "measure_bandwidth"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_kernels_simd() -> str:
    """The SIMD level the C++ CPU kernels run (TORCH_DML_OPS_CPU_ISA caps it)."""
    if not extension_loaded():
        return "C++ kernels not built"
    return f"C++ kernels: {torch.ops.torch_dml_ops._cpu_isa()}"


def machine_description(device: str) -> str:
    cpu = (f"{_cpu_model()}, {os.cpu_count()} logical CPUs, {platform.machine()} "
           f"{platform.system()}, {_cpu_kernels_simd()}")
    if device == "cuda":
        return f"{torch.cuda.get_device_name()} (host: {cpu})"
    return cpu


def _loadavg() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except (AttributeError, OSError):
        return "n/a"


def build_cases(ops: Sequence[str], device: str, peer_hook, quick: bool, series: bool,
                named: bool, only: Optional[str]) -> List[Case]:
    sizes = _cases.QUICK_SERIES if quick else _cases.FULL_SERIES
    out = []
    for op in ops:
        kw = {"directions": (True,)} if quick and op == "top_k1" else {}
        for c in _cases.OPS[op](device=device, peers=peer_hook,
                                series_sizes=sizes[op] if series else (), named=named, **kw):
            if only is None or only in c.name:
                out.append(c)
    return out


def mark_stability(rows: List[Row]) -> List[str]:
    """Top-k providers that broke DirectML's tie order on the ties probe are unstable; mark all
    their rows.  Returns the names."""
    probe = [r for r in rows if r.op == "top_k1" and r.case.startswith(_cases.PROBE)]
    unstable = sorted({r.provider for r in probe if r.agreement == TIE_ORDER})
    checked = {r.provider for r in probe if r.agreement}
    for r in rows:
        if r.op == "top_k1" and r.provider in checked:
            r.stable = r.provider not in unstable
    return unstable


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m torch_dml_ops.bench",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ops", nargs="*", help=f"ops to run (default all: {', '.join(_cases.OPS)})")
    ap.add_argument("--quick", action="store_true",
                    help="fewer series sizes, fewer and shorter rounds (under 2 minutes here)")
    ap.add_argument("--peers", default="all",
                    help="all (those installed), none, or a comma list of "
                         f"{','.join(_peers.PEER_NAMES)}")
    ap.add_argument("--no-series", action="store_true", help="named cases only")
    ap.add_argument("--no-named", action="store_true", help="scaling series only")
    ap.add_argument("--case", metavar="TEXT", help="only cases whose name contains TEXT")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="auto: cuda when available, else cpu")
    ap.add_argument("--json", metavar="PATH", help="write every row as JSON")
    ap.add_argument("--markdown", metavar="PATH", help="write the tables as Markdown")
    ap.add_argument("--plot", metavar="PATH", help="write the scaling plot as PNG (matplotlib)")
    ap.add_argument("--detail", action="store_true",
                    help="also print every provider's row (always in --markdown)")
    ap.add_argument("--repeats", type=int, help="timed rounds per provider")
    ap.add_argument("--block-ms", type=float, help="target duration of one timed block")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--copy-mb", type=int, help="buffer size of the copy-bandwidth measurement "
                    "(default 256, 64 with --quick)")
    args = ap.parse_args(argv)

    unknown = [o for o in args.ops if o not in _cases.OPS]
    if unknown:
        ap.error(f"unknown op(s) {unknown}; known: {list(_cases.OPS)}")
    if args.no_series and args.no_named:
        ap.error("--no-series and --no-named leave nothing to run")
    if args.peers == "all":
        peer_names = list(_peers.PEER_NAMES)
    elif args.peers == "none":
        peer_names = []
    else:
        peer_names = [p.strip() for p in args.peers.split(",") if p.strip()]
        bad = [p for p in peer_names if p not in _peers.PEER_NAMES]
        if bad:
            ap.error(f"unknown peer(s) {bad}; known: {list(_peers.PEER_NAMES)}")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device")

    settings = Settings(**vars(QUICK)) if args.quick else Settings()
    if args.repeats:
        settings.repeats = args.repeats
    if args.block_ms:
        settings.block_s = args.block_ms / 1e3

    t_start = time.perf_counter()
    threads = torch.get_num_threads()
    explicit = args.peers not in ("all",)
    peers, skipped = _peers.load_peers(peer_names, threads) if device == "cpu" else ([], {})
    if device != "cpu" and peer_names:
        skipped = {p: "peers run on the CPU only; this run is on the GPU" for p in peer_names}
    if explicit and skipped:
        ap.error(f"requested peer(s) not available: {skipped}")
    copy_mb = args.copy_mb or (64 if args.quick else 256)
    bw: Bandwidth = measure_bandwidth(copy_mb << 20, device=device)
    meta = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_description(device), "device": device,
        "torch": torch.__version__, "torch_dml_ops": tdo.__version__, "threads": threads,
        "python": platform.python_version(),
        "peers": _peers.versions(peers), "peers_skipped": skipped,
        "copy_bandwidth_GBps": bw.copy_bytes_per_s / 1e9,
        "fresh_memory_GBps": bw.fresh_bytes_per_s / 1e9,
        "repeats": settings.repeats, "block_ms": settings.block_s * 1e3, "quick": args.quick,
        "loadavg_1m_start": _loadavg(),
        "command": "python -m torch_dml_ops.bench " + " ".join(argv if argv is not None
                                                               else sys.argv[1:]),
    }
    header = (f"{meta['date']} · {meta['machine']} · torch {meta['torch']} ({threads} threads) · "
              f"torch_dml_ops {meta['torch_dml_ops']} · peers: "
              + (", ".join(f"{k} {v}" for k, v in meta["peers"].items()) or "none")
              + (f" (skipped: {', '.join(skipped)})" if skipped else "")
              + f" · copy bandwidth {meta['copy_bandwidth_GBps']:.1f} GB/s (read+write), "
              f"first touch of fresh memory {meta['fresh_memory_GBps']:.1f} GB/s")
    print(header, flush=True)
    for name, why in skipped.items():
        print(f"  peer {name} skipped: {why}", flush=True)

    ops = args.ops or list(_cases.OPS)
    todo = build_cases(ops, device, _peers.hook(peers, device), args.quick,
                       series=not args.no_series, named=not args.no_named, only=args.case)
    rows: List[Row] = []
    for i, case in enumerate(todo, 1):
        t0 = time.perf_counter()
        print(f"[{i:3d}/{len(todo)}] {case.op} · {case.name} · {len(case.providers)} providers …",
              end="", flush=True, file=sys.stderr)
        case_rows = run_case(case, settings, args.seed, bw.copy_bytes_per_s)
        rows.extend(case_rows)
        v = _report.verdict(case_rows)
        ratio = "" if v["ratio"] is None else f" ours ÷ best other {v['ratio']:.2f} ({v['place']})"
        ratio += "".join(f", ÷ yardstick {r:.2f}" for _, r in _report.yardstick_ratios(case_rows,
                                                                                   case.op))
        bad = [r.provider for r in case_rows if r.error]
        print(f" {time.perf_counter() - t0:.1f} s{ratio}"
              + (f"  [not timed: {', '.join(bad)}]" if bad else "")
              + f"  (elapsed {time.perf_counter() - t_start:.0f} s)", flush=True, file=sys.stderr)
    unstable = mark_stability(rows)
    _report.recompute_ratios(rows)
    meta["unstable_topk"] = unstable
    meta["loadavg_1m_end"] = _loadavg()
    meta["total_s"] = time.perf_counter() - t_start

    notes = [
        "ours = this package's op (the first of its providers in the case); best torch-native = "
        "the fastest of the torch formulations of the same computation; ours ÷ best other and "
        "place compare with the fastest provider that computed the same result (unstable top-k "
        "left out); copy limit = bytes an "
        "ideal implementation moves ÷ the copy bandwidth above; place: first / tied (within "
        f"{_report.TIE:.2f}x) / behind the fastest other provider (torch-native or peer).",
        "✗ = result disagreed with ours (not timed; see --detail); n/a = not run; "
        "† = values exact, ties in another order than DirectML's (an unstable top-k)."]
    if unstable:
        notes.append("Unstable top-k on the ties probe (tie order differs from lower index "
                     "first): " + ", ".join(unstable) + ".")
    summary = _report.summary_table(rows)
    board = _report.scoreboard(rows)
    print()
    print(summary)
    print()
    for n in notes + board:
        print(n)
    if args.detail:
        print()
        print(_report.detail_table(rows))
    print(f"Total {meta['total_s']:.0f} s")

    for path in (args.markdown, args.json, args.plot):
        if path and os.path.dirname(path):
            # a run takes minutes: never lose it to a missing output folder
            os.makedirs(os.path.dirname(path), exist_ok=True)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"# torch_dml_ops benchmark\n\n{header}\n\nCommand: `{meta['command']}`\n\n")
            f.write(summary + "\n\n" + "\n".join(f"* {n}" for n in notes + board) + "\n\n")
            f.write("## Every provider\n\n" + _report.detail_table(rows) + "\n")
        print(f"wrote {args.markdown}")
    if args.json:
        _report.write_json(args.json, meta, rows)
        print(f"wrote {len(rows)} rows to {args.json}")
    if args.plot:
        plot_error = _report.plot(args.plot, rows, header)
        print(plot_error if plot_error else f"wrote {args.plot}")
    # Exit status: 1 when one of our providers failed or disagreed with the reference.
    return 1 if any(r.error and r.kind == "ours" for r in rows) else 0
