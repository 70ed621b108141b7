"""Micro-benchmarks: torch_dml_ops ops against torch-native formulations of the same computation.

Run::

    python -m torch_dml_ops.bench                  # every op
    python -m torch_dml_ops.bench gather_nd        # one op (several may be named)
    python -m torch_dml_ops.bench --quick          # shorter timing (a smoke run, noisier)
    python -m torch_dml_ops.bench --json rows.json # also write the result rows as JSON
    python -m torch_dml_ops.bench --case row       # only cases whose name contains "row"

What it does, per case: build the inputs once (``torch.manual_seed``), run every provider once
and check that its result equals the reference provider's (``torch.equal``; a mismatch is
reported and that provider is not timed), then time all providers *interleaved* in the same
process: ``repeats`` rounds, and in each round every provider runs one block of ``number`` calls
(``number`` calibrated so a block lasts about ``block_s``).  A row reports the median per-call
time over the rounds, the spread (inter-quartile range, and min/max in the JSON), and the ratio
to the fastest torch-native provider of the case (``> 1`` means slower than plain torch).

The device is wherever ``make_inputs`` puts the tensors (CPU here); the backend is whatever
``torch_dml_ops`` picks for it (the portable torch path on CPU).  torch's intra-op thread count
is left at its default and reported.

Adding an op: write a function returning a list of ``Case`` and register it in ``OPS``.
A ``Case`` holds ``make_inputs(seed) -> dict`` and ``providers: name -> callable(inputs)``;
``reference`` names the provider whose result is the truth, ``ours`` the providers that belong to
this package (every other provider counts as torch-native for the ratio).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

import torch_dml_ops as tdo

Inputs = Dict[str, object]
Provider = Callable[[Inputs], torch.Tensor]


@dataclass
class Case:
    """One benchmark problem and the ways to compute it."""
    op: str                                  # e.g. "gather_nd"
    name: str                                # short case name, unique within the op
    make_inputs: Callable[[int], Inputs]     # seed -> inputs (tensors and constants)
    providers: Dict[str, Provider]           # name -> callable(inputs) -> result tensor
    reference: str                           # provider whose result the others must equal
    ours: Tuple[str, ...] = ()               # providers from this package (not torch-native)
    note: str = ""                           # shown under the table
    baselines: Tuple[str, ...] = ()          # yardsticks (e.g. a plain copy of the same bytes):
                                             # not checked against the reference, not "torch best"

    def __post_init__(self):
        if self.reference not in self.providers:
            raise ValueError(f"{self.op}/{self.name}: reference {self.reference!r} not a provider")

    def is_native(self, provider: str) -> bool:
        return provider not in self.ours and provider not in self.baselines


@dataclass
class Settings:
    repeats: int = 21        # rounds; the median and spread are taken over these
    block_s: float = 0.1     # target duration of one timed block (calls of one provider)
    warmup: int = 2          # untimed calls per provider before calibration


QUICK = Settings(repeats=7, block_s=0.015, warmup=1)


@dataclass
class Row:
    op: str
    case: str
    provider: str
    shape: str
    dtype: str
    median_s: Optional[float] = None
    q1_s: Optional[float] = None
    q3_s: Optional[float] = None
    min_s: Optional[float] = None
    max_s: Optional[float] = None
    number: int = 0
    repeats: int = 0
    ratio: Optional[float] = None
    native: bool = True
    error: str = ""
    extra: Dict[str, object] = field(default_factory=dict)

    @property
    def spread(self) -> Optional[float]:
        return None if self.q1_s is None else self.q3_s - self.q1_s


# ---------------------------------------------------------------------------------------------
# gather_nd cases
# ---------------------------------------------------------------------------------------------

def _row_major_strides(sizes: Sequence[int]) -> List[int]:
    strides, s = [], 1
    for n in reversed(sizes):
        strides.append(s)
        s *= n
    return strides[::-1]


def _gather_inputs(input_shape: Sequence[int], n: int, k: int, with_out: bool = False
                   ) -> Callable[[int], Inputs]:
    input_shape = tuple(input_shape)

    def make(seed: int) -> Inputs:
        torch.manual_seed(seed)
        x = torch.randn(input_shape, dtype=torch.float32)
        cols = [torch.randint(0, input_shape[j], (n,), dtype=torch.int64)
                for j in range(k)]
        idx = torch.stack(cols, dim=1).contiguous()
        slice_shape = input_shape[k:]
        slice_len = math.prod(slice_shape)
        d = {"x": x, "idx": idx, "k": k, "slice_len": slice_len,
             "strides": torch.tensor(_row_major_strides(input_shape[:k]), dtype=torch.int64),
             "stride_list": _row_major_strides(input_shape[:k]),
             "out_shape": (n,) + slice_shape}
        if with_out:
            d["out"] = torch.empty((n,) + slice_shape, dtype=x.dtype)
        return d
    return make


def _lin_mul_sum(d: Inputs) -> torch.Tensor:
    return (d["idx"] * d["strides"]).sum(-1)


def _lin_add_chain(d: Inputs) -> torch.Tensor:
    idx, st = d["idx"], d["stride_list"]
    k = d["k"]
    lin = idx[:, k - 1]
    for j in range(k - 2, -1, -1):
        lin = torch.add(lin, idx[:, j], alpha=st[j])
    return lin


def _src_rows(d: Inputs) -> torch.Tensor:
    return d["x"].reshape(-1, d["slice_len"])


def _index_select(d: Inputs, lin: torch.Tensor) -> torch.Tensor:
    src = _src_rows(d)
    if "out" in d:
        out = d["out"]
        torch.index_select(src, 0, lin, out=out.view(-1, d["slice_len"]))
        return out
    return src.index_select(0, lin).view(d["out_shape"])


def _adv_index(d: Inputs) -> torch.Tensor:
    idx = d["idx"]
    return d["x"][tuple(idx[:, j] for j in range(d["k"]))]


def _take(d: Inputs) -> torch.Tensor:
    return torch.take(d["x"], _lin_mul_sum(d))


def _ours(d: Inputs) -> torch.Tensor:
    if "out" in d:
        return tdo.gather_nd(d["x"], d["idx"], out=d["out"])
    return tdo.gather_nd(d["x"], d["idx"])


def _ours_nocheck(d: Inputs) -> torch.Tensor:
    if "out" in d:
        return tdo.gather_nd(d["x"], d["idx"], check_indices=False, out=d["out"])
    return tdo.gather_nd(d["x"], d["idx"], check_indices=False)


def gather_nd_cases() -> List[Case]:
    specs = [
        # name, input shape, n tuples, k, with out=
        ("element 4096x4096 k=2 n=1M", (4096, 4096), 1_000_000, 2, False),
        ("row 100000x256 k=1 n=64K", (100_000, 256), 65_536, 1, False),
        ("row 100000x256 k=1 n=64K out=", (100_000, 256), 65_536, 1, True),
        ("4d 8x64x64x64 k=3 n=32K", (8, 64, 64, 64), 32_768, 3, False),
        ("small 64x64 k=2 n=128", (64, 64), 128, 2, False),
    ]
    cases = []
    for name, shape, n, k, with_out in specs:
        providers: Dict[str, Provider] = {
            "tdo.gather_nd": _ours,
            "tdo.gather_nd(check_indices=False)": _ours_nocheck,
        }
        if not with_out:   # advanced indexing has no out= form
            providers["torch adv-index"] = _adv_index
        providers["torch mul-sum+index_select"] = lambda d: _index_select(d, _lin_mul_sum(d))
        providers["torch add-chain+index_select"] = lambda d: _index_select(d, _lin_add_chain(d))
        if len(shape) == k and not with_out:   # element gather: slice of 1
            providers["torch take"] = _take
        cases.append(Case(
            op="gather_nd", name=name, make_inputs=_gather_inputs(shape, n, k, with_out),
            providers=providers, reference="tdo.gather_nd",
            ours=("tdo.gather_nd", "tdo.gather_nd(check_indices=False)"),
            note=("out= variant: ours and the index_select providers write into one "
                  "preallocated buffer") if with_out else ""))
    return cases


# ---------------------------------------------------------------------------------------------
# scatter_nd cases
# ---------------------------------------------------------------------------------------------

def _scatter_inputs(input_shape: Sequence[int], n: int, k: int) -> Callable[[int], Inputs]:
    input_shape = tuple(input_shape)

    def make(seed: int) -> Inputs:
        torch.manual_seed(seed)
        x = torch.randn(input_shape, dtype=torch.float32)
        space = math.prod(input_shape[:k])
        flat = torch.randperm(space)[:n]                     # unique tuples
        cols = []
        for size in reversed(input_shape[:k]):
            cols.append(flat % size)
            flat = flat // size
        idx = torch.stack(cols[::-1], dim=1).contiguous()
        slice_shape = input_shape[k:]
        upd = torch.randn((n,) + slice_shape, dtype=torch.float32)
        return {"x": x, "idx": idx, "upd": upd, "k": k, "slice_len": math.prod(slice_shape),
                "stride_list": _row_major_strides(input_shape[:k]), "bufs": {}}
    return make


def _buf(d: Inputs, name: str) -> torch.Tensor:
    """A per-provider destination, holding the input (allocated once: no page faults timed)."""
    bufs = d["bufs"]
    if name not in bufs:
        bufs[name] = d["x"].clone()
    return bufs[name]


def _s_lin(d: Inputs) -> torch.Tensor:
    return _lin_add_chain(d)


def _s_rows(t: torch.Tensor, d: Inputs) -> torch.Tensor:
    return t.view(-1, d["slice_len"])


def _s_upd_rows(d: Inputs) -> torch.Tensor:
    return d["upd"].view(-1, d["slice_len"])


def _s_cols(d: Inputs):
    return tuple(d["idx"][:, j] for j in range(d["k"]))


def scatter_nd_cases() -> List[Case]:
    specs = [
        ("element 4096x4096 k=2 n=1M", (4096, 4096), 1_000_000, 2),
        ("row 100000x256 k=1 n=64K", (100_000, 256), 65_536, 1),
        ("4d 8x64x64x64 k=3 n=32K", (8, 64, 64, 64), 32_768, 3),
        ("small 64x64 k=2 n=128", (64, 64), 128, 2),
    ]
    cases = []
    for name, shape, n, k in specs:
        make = _scatter_inputs(shape, n, k)
        functional: Dict[str, Provider] = {
            "tdo.scatter_nd": lambda d: tdo.scatter_nd(d["x"], d["idx"], d["upd"]),
            "torch clone+index_put_": lambda d: d["x"].clone().index_put_(_s_cols(d), d["upd"]),
            "torch clone+index_copy_ (rows)": lambda d: _s_rows(d["x"].clone(), d).index_copy_(
                0, _s_lin(d), _s_upd_rows(d)).view(d["x"].shape),
        }
        cases.append(Case("scatter_nd", name, make, functional, reference="tdo.scatter_nd",
                          ours=("tdo.scatter_nd",)))
        if name.startswith("small"):
            continue
        into: Dict[str, Provider] = {
            "tdo.scatter_nd(out=)": lambda d: tdo.scatter_nd(d["x"], d["idx"], d["upd"],
                                                             out=_buf(d, "ours")),
            "torch copy_+index_copy_ (rows)": lambda d: _s_rows(_buf(d, "ic").copy_(d["x"]), d)
                .index_copy_(0, _s_lin(d), _s_upd_rows(d)).view(d["x"].shape),
            "torch copy_+index_put_": lambda d: _buf(d, "ip").copy_(d["x"]).index_put_(
                _s_cols(d), d["upd"]),
        }
        cases.append(Case("scatter_nd", name + " out=", make, into,
                          reference="tdo.scatter_nd(out=)", ours=("tdo.scatter_nd(out=)",),
                          note="out=: every provider writes into its own preallocated buffer"))
        inplace: Dict[str, Provider] = {
            "tdo.scatter_nd_": lambda d: tdo.scatter_nd_(_buf(d, "ours"), d["idx"], d["upd"]),
            "torch index_copy_ (rows)": lambda d: _s_rows(_buf(d, "ic"), d).index_copy_(
                0, _s_lin(d), _s_upd_rows(d)).view(d["x"].shape),
            "torch index_put_": lambda d: _buf(d, "ip").index_put_(_s_cols(d), d["upd"]),
            "copy of the updates' bytes": lambda d: _buf(d, "cp").view(-1)[:d["upd"].numel()]
                .copy_(d["upd"].view(-1)),
        }
        cases.append(Case("scatter_nd", name + " in-place", make, inplace,
                          reference="tdo.scatter_nd_", ours=("tdo.scatter_nd_",),
                          baselines=("copy of the updates' bytes",),
                          note="in-place: the yardstick is a contiguous copy of the bytes the "
                               "scatter writes"))
    return cases


# ---------------------------------------------------------------------------------------------
# top_k1 cases
# ---------------------------------------------------------------------------------------------

def _topk_inputs(shape, k, largest, ties=False) -> Callable[[int], Inputs]:
    def make(seed: int) -> Inputs:
        torch.manual_seed(seed)
        x = (torch.randint(0, 16, shape, dtype=torch.int32) if ties
             else torch.randn(shape, dtype=torch.float32))
        return {"x": x, "k": k, "largest": largest}
    return make


def _tk_ours(d: Inputs):
    res = tdo.top_k1(d["x"], d["k"], -1, "decreasing" if d["largest"] else "increasing")
    return torch.cat([res.values.double().flatten(), res.indices.double().flatten()])


def _tk_sort(d: Inputs):
    v, i = torch.sort(d["x"], dim=-1, descending=d["largest"], stable=True)
    k = d["k"]
    return torch.cat([v[..., :k].double().flatten(), i[..., :k].double().flatten()])


def _tk_topk(d: Inputs):
    v, i = torch.topk(d["x"], d["k"], dim=-1, largest=d["largest"])
    return torch.cat([v.double().flatten(), i.double().flatten()])


def top_k1_cases() -> List[Case]:
    specs = [((1, 1_000_000), k, False) for k in (1, 10, 100, 1000)]
    specs += [((4096, 1024), k, False) for k in (1, 8, 64)]
    specs += [((32, 50257), 50, False), ((4096, 1024), 8, True)]
    cases = []
    for shape, k, ties in specs:
        for largest in (True, False):
            name = (f"{'x'.join(map(str, shape))} k={k}{' int32 0..15 ties' if ties else ''} "
                    f"{'largest' if largest else 'smallest'}")
            cases.append(Case(
                "top_k1", name, _topk_inputs(shape, k, largest, ties),
                {"tdo.top_k1": _tk_ours, "torch.sort(stable)+slice": _tk_sort,
                 "torch.topk (unstable)": _tk_topk},
                reference="torch.sort(stable)+slice", ours=("tdo.top_k1",),
                baselines=("torch.topk (unstable)",),
                note="torch.topk does not order ties (not checked, ratio column is vs stable sort);"
                     " its time is the yardstick for 'as fast as torch.topk'"))
    return cases


OPS: Dict[str, Callable[[], List[Case]]] = {
    "gather_nd": gather_nd_cases,
    "scatter_nd": scatter_nd_cases,
    "top_k1": top_k1_cases,
}


# ---------------------------------------------------------------------------------------------
# Runner
# ---------------------------------------------------------------------------------------------

def _describe(inputs: Inputs) -> Tuple[str, str]:
    shapes, dtypes = [], []
    for key, v in inputs.items():
        if isinstance(v, torch.Tensor) and v.dim() > 0 and key not in ("strides",):
            shapes.append(f"{key}={list(v.shape)}")
            dtypes.append(f"{key}={str(v.dtype).replace('torch.', '')}")
    return " ".join(shapes), " ".join(dtypes)


def _sync(result):
    # CPU ops are synchronous; on an accelerator wait for the queued work.
    if isinstance(result, torch.Tensor) and result.device.type == "cuda":
        torch.cuda.synchronize(result.device)


def _time_block(fn: Provider, inputs: Inputs, number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        r = fn(inputs)
    _sync(r)
    return (time.perf_counter() - t0) / number


def _quantiles(xs: List[float]) -> Tuple[float, float, float]:
    xs = sorted(xs)
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def run_case(case: Case, settings: Settings, seed: int = 0, log=print) -> List[Row]:
    inputs = case.make_inputs(seed)
    shape, dtype = _describe(inputs)
    rows: Dict[str, Row] = {}
    for pname in case.providers:
        rows[pname] = Row(case.op, case.name, pname, shape, dtype, native=case.is_native(pname))

    # Correctness first: every provider must reproduce the reference exactly.
    ref = case.providers[case.reference](inputs)
    ref = ref.clone()
    live: List[str] = []
    for pname, fn in case.providers.items():
        try:
            res = fn(inputs)
        except Exception as e:  # report, keep benchmarking the rest
            rows[pname].error = f"raised {type(e).__name__}: {e}"
            continue
        if pname in case.baselines:
            live.append(pname)
            continue
        if not (res.shape == ref.shape and res.dtype == ref.dtype and torch.equal(res, ref)):
            rows[pname].error = (f"result differs from {case.reference} "
                                 f"(shape {tuple(res.shape)} vs {tuple(ref.shape)})")
            continue
        live.append(pname)
    del ref

    # Warm up and calibrate the block size of each provider.
    number: Dict[str, int] = {}
    for pname in live:
        fn = case.providers[pname]
        for _ in range(settings.warmup):
            _sync(fn(inputs))
        # timeit-style: grow the block until it lasts a fifth of the target, then scale up.
        n = 1
        while True:
            t = min(_time_block(fn, inputs, n) for _ in range(2)) * n
            if t >= settings.block_s / 5 or n >= 1 << 20:
                break
            n *= 4 if t < settings.block_s / 50 else 2
        number[pname] = max(1, round(n * settings.block_s / max(t, 1e-9)))

    samples: Dict[str, List[float]] = {p: [] for p in live}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(settings.repeats):
            # Interleave providers; rotate the order so none always runs first.
            order = live[r % len(live):] + live[:r % len(live)] if live else []
            for pname in order:
                samples[pname].append(_time_block(case.providers[pname], inputs, number[pname]))
    finally:
        if gc_was_enabled:
            gc.enable()

    for pname in live:
        row = rows[pname]
        q1, med, q3 = _quantiles(samples[pname])
        row.median_s, row.q1_s, row.q3_s = med, q1, q3
        row.min_s, row.max_s = min(samples[pname]), max(samples[pname])
        row.number, row.repeats = number[pname], settings.repeats
    natives = [rows[p].median_s for p in live if case.is_native(p)]
    best = min(natives) if natives else None
    yard = [rows[p].median_s for p in live if p in case.baselines]
    for pname in live:
        if best:
            rows[pname].ratio = rows[pname].median_s / best
        if yard:
            rows[pname].extra["ratio_to_yardstick"] = rows[pname].median_s / yard[0]
    return list(rows.values())


def _fmt_ms(s: Optional[float]) -> str:
    if s is None:
        return "-"
    ms = s * 1e3
    return f"{ms:.4f}" if ms < 0.1 else f"{ms:.3f}" if ms < 10 else f"{ms:.2f}"


def markdown_table(rows: List[Row]) -> str:
    lines = ["| case | provider | median ms | IQR ms (min–max) | ratio to best torch | ratio to yardstick |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        if r.error:
            lines.append(f"| {r.case} | {r.provider} | ERROR | {r.error} | - | - |")
            continue
        spread = (f"{_fmt_ms(r.spread)} ({_fmt_ms(r.min_s)}–{_fmt_ms(r.max_s)})")
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
        if r.ratio is not None and r.native and abs(r.ratio - 1.0) < 1e-12:
            ratio += " (best)"
        yard = r.extra.get("ratio_to_yardstick")
        yard = "-" if yard is None else f"{yard:.2f}"
        name = f"**{r.provider}**" if not r.native else r.provider
        lines.append(f"| {r.case} | {name} | {_fmt_ms(r.median_s)} | {spread} | {ratio} | {yard} |")
    return "\n".join(lines)


def _loadavg() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except (AttributeError, OSError):
        return "n/a"


def _header(settings: Settings) -> str:
    return (f"torch {torch.__version__}, torch_dml_ops {tdo.__version__}, "
            f"{platform.machine()} {platform.system()}, threads={torch.get_num_threads()}, "
            f"backends={tdo.available_backends()}, repeats={settings.repeats}, "
            f"loadavg(1m)={_loadavg()}, "
            f"block≈{settings.block_s * 1e3:.0f} ms")


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m torch_dml_ops.bench", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ops", nargs="*", help=f"ops to run (default all: {', '.join(OPS)})")
    ap.add_argument("--quick", action="store_true", help="short timing (smoke run)")
    ap.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    ap.add_argument("--case", metavar="SUBSTR", help="only cases whose name contains SUBSTR")
    ap.add_argument("--repeats", type=int, help="timed rounds per provider (>= 7 recommended)")
    ap.add_argument("--block-ms", type=float, help="target duration of one timed block")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    unknown = [o for o in args.ops if o not in OPS]
    if unknown:
        ap.error(f"unknown op(s) {unknown}; known: {list(OPS)}")
    settings = Settings(**vars(QUICK)) if args.quick else Settings()
    if args.repeats:
        settings.repeats = args.repeats
    if args.block_ms:
        settings.block_s = args.block_ms / 1e3

    load_start = _loadavg()
    print(_header(settings), flush=True)
    t_start = time.perf_counter()
    all_rows: List[Row] = []
    notes: List[str] = []
    for op in (args.ops or list(OPS)):
        for case in OPS[op]():
            if args.case and args.case not in case.name:
                continue
            t0 = time.perf_counter()
            print(f"  {op} / {case.name} ...", end="", flush=True, file=sys.stderr)
            all_rows.extend(run_case(case, settings, args.seed))
            print(f" {time.perf_counter() - t0:.1f}s", flush=True, file=sys.stderr)
            if case.note:
                notes.append(f"{case.name}: {case.note}")
    print()
    print(markdown_table(all_rows))
    print()
    print("Ratio = median / median of the fastest torch-native provider of the case "
          "(ours and yardsticks in bold; > 1 means slower than plain torch).  Yardstick: the "
          "case's reference cost (a plain copy of the written bytes for in-place scatters, "
          "unstable torch.topk for top-k).")
    for n in notes:
        print(f"Note — {n}")
    print(f"Total {time.perf_counter() - t_start:.1f}s")

    if args.json:
        meta = {"torch": torch.__version__, "torch_dml_ops": tdo.__version__,
                "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "threads": torch.get_num_threads(), "machine": platform.machine(),
                "repeats": settings.repeats, "block_s": settings.block_s,
                "loadavg_1m_start": load_start, "loadavg_1m_end": _loadavg()}
        out = []
        for r in all_rows:
            out.append({"op": r.op, "case": r.case, "provider": r.provider, "shape": r.shape,
                        "dtype": r.dtype, "median_s": r.median_s,
                        "spread": {"q1_s": r.q1_s, "q3_s": r.q3_s, "iqr_s": r.spread,
                                   "min_s": r.min_s, "max_s": r.max_s},
                        "ratio": r.ratio, "torch_native": r.native, "number": r.number,
                        "repeats": r.repeats, "error": r.error or None,
                        "torch_version": meta["torch"], "date": meta["date"]})
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": out}, f, indent=2)
        print(f"wrote {len(out)} rows to {args.json}")
    return 1 if any(r.error for r in all_rows) else 0


if __name__ == "__main__":
    sys.exit(main())
