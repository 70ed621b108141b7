"""The measuring machinery: cases, providers, agreement checks, interleaved timing, copy bandwidth.

Nothing here knows an op: ``cases.py`` builds ``Case`` objects, ``peers.py`` adds the other
libraries' providers, ``report.py`` turns ``Row`` objects into tables, JSON and a plot.
"""
from __future__ import annotations

import contextlib
import gc
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

import torch

#: The inputs of a case: tensors and constants by name (a heterogeneous bag; the providers
#: know what each key holds).
Inputs = Dict[str, Any]

#: Provider kinds. ``ours``: this package; ``torch``: a torch-native formulation of the same
#: computation; ``peer``: another library (onnxruntime, TensorFlow, JAX); ``yardstick``: a
#: reference cost that is not the same computation (a plain copy of the bytes written), never
#: checked and never "the best other".
KINDS = ("ours", "torch", "peer", "yardstick")

#: Agreement of a provider's result with the reference.
EXACT = "exact"
TIE_ORDER = "values exact, tie order differs"   # top-k: an unstable top-k (still timed, marked)


@dataclass
class Provider:
    """One way of computing a case: ``fn(inputs)`` runs it (and waits for it: asynchronous
    libraries block inside ``fn``), ``to_torch(result)`` turns its result into torch tensors (a
    tensor or a tuple of them) for the agreement check."""
    name: str
    fn: Callable[[Inputs], object]
    kind: str = "torch"
    to_torch: Optional[Callable[[object], object]] = None
    library: str = "torch"        # the column of the summary table it belongs to
    note: str = ""
    #: A context manager factory entered around every block of calls (never inside a timed
    #: call), e.g. ``lambda: torch_dml_ops._backend.override("torch")`` (private, single-threaded).
    context: Optional[Callable[[], object]] = None
    #: Seconds to wait after each of its timed blocks (not timed): a provider that leaves busy
    #: threads behind (onnxruntime's spinning workers) must not slow the next one's block.
    pause_after: float = 0.0

    def entered(self):
        return self.context() if self.context is not None else contextlib.nullcontext()

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"provider {self.name!r}: kind {self.kind!r} not in {KINDS}")


def _exact(ref, res) -> Optional[str]:
    """None when ``res`` equals ``ref`` bit for bit (shapes, dtypes, values), else why not."""
    ref = ref if isinstance(ref, tuple) else (ref,)
    res = res if isinstance(res, tuple) else (res,)
    if len(ref) != len(res):
        return f"{len(res)} results, expected {len(ref)}"
    for i, (a, b) in enumerate(zip(ref, res)):
        if tuple(a.shape) != tuple(b.shape):
            return f"result {i}: shape {tuple(b.shape)}, expected {tuple(a.shape)}"
        if a.dtype != b.dtype:
            b = b.to(a.dtype)
        if not torch.equal(a.cpu(), b.cpu()):
            bad = int((a.cpu() != b.cpu()).sum())
            return f"result {i}: {bad} of {a.numel()} elements differ"
    return None


@dataclass
class Case:
    """One benchmark problem and the ways to compute it."""
    op: str                                  # e.g. "gather_nd"
    name: str                                # unique within the op
    make_inputs: Callable[[int], Inputs]     # seed -> inputs (tensors and constants)
    providers: List[Provider]
    reference: str                           # provider whose result the others must reproduce
    series: str = ""                         # scaling series this case belongs to ("" = named)
    size: int = 0                            # the series' x value: elements of the data tensor
    ideal_bytes: Callable[[Inputs], int] = lambda d: 0   # bytes an ideal implementation moves
    large: bool = False                      # counts for "first on every large case"
    note: str = ""
    # (ref, res, inputs) -> None | TIE_ORDER | reason for disagreement
    compare: Callable[[object, object, Inputs], Optional[str]] = lambda a, b, d: _exact(a, b)

    def __post_init__(self):
        names = [p.name for p in self.providers]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.op}/{self.name}: duplicate provider names {names}")
        if self.reference not in names:
            raise ValueError(f"{self.op}/{self.name}: reference {self.reference!r} not a provider")

    def provider(self, name: str) -> Provider:
        return next(p for p in self.providers if p.name == name)


@dataclass
class Settings:
    repeats: int = 11        # rounds; median and spread are taken over these
    block_s: float = 0.05    # target duration of one timed block (calls of one provider)
    warmup: int = 2          # untimed calls per provider before calibration
    max_case_s: float = 20.0  # a provider slower than this per call is timed fewer rounds


QUICK = Settings(repeats=5, block_s=0.01, warmup=1, max_case_s=5.0)


@dataclass
class Row:
    op: str
    case: str
    provider: str
    kind: str
    library: str
    series: str = ""
    size: int = 0
    shape: str = ""
    dtype: str = ""
    median_s: Optional[float] = None
    q1_s: Optional[float] = None
    q3_s: Optional[float] = None
    min_s: Optional[float] = None
    max_s: Optional[float] = None
    number: int = 0
    repeats: int = 0
    agreement: str = ""             # EXACT, TIE_ORDER, "reference", "not checked (yardstick)"
    error: str = ""
    ideal_bytes: int = 0
    limit_s: Optional[float] = None  # ideal_bytes / copy bandwidth measured in this run
    ratio_best_other: Optional[float] = None   # median / fastest non-ours, non-yardstick median
    large: bool = False
    note: str = ""
    stable: Optional[bool] = None    # top-k: did it keep DirectML's tie order on the ties probe

    @property
    def spread(self) -> Optional[float]:
        return None if self.q1_s is None or self.q3_s is None else self.q3_s - self.q1_s

    @property
    def timed(self) -> bool:
        return self.median_s is not None


def describe(inputs: Inputs) -> Tuple[str, str]:
    shapes, dtypes = [], []
    for key, v in inputs.items():
        if isinstance(v, torch.Tensor) and v.dim() > 0 and not key.startswith("_"):
            shapes.append(f"{key}={list(v.shape)}")
            dtypes.append(f"{key}={str(v.dtype).replace('torch.', '')}")
    return " ".join(shapes), " ".join(dtypes)


def _sync(result) -> None:
    """CPU work is done when a torch op returns; CUDA work is queued, so wait for it."""
    first = result[0] if isinstance(result, tuple) and result else result
    if isinstance(first, torch.Tensor) and first.device.type == "cuda":
        torch.cuda.synchronize(first.device)


def _time_block(fn, inputs: Inputs, number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        r = fn(inputs)
    _sync(r)
    return (time.perf_counter() - t0) / number


def quartiles(xs: Sequence[float]) -> Tuple[float, float, float]:
    xs = sorted(xs)
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def _as_torch(p: Provider, res):
    return p.to_torch(res) if p.to_torch is not None else res


def run_case(case: Case, settings: Settings, seed: int = 0, bandwidth: Optional[float] = None
             ) -> List[Row]:
    """Check every provider against the reference, then time them interleaved."""
    inputs = case.make_inputs(seed)
    shape, dtype = describe(inputs)
    ideal = int(case.ideal_bytes(inputs))
    limit = ideal / bandwidth if bandwidth and ideal else None
    rows: Dict[str, Row] = {
        p.name: Row(case.op, case.name, p.name, p.kind, p.library, case.series, case.size, shape,
                    dtype, ideal_bytes=ideal, limit_s=limit, large=case.large, note=p.note)
        for p in case.providers}

    # Correctness first: a provider that does not reproduce the reference is not timed.
    refp = case.provider(case.reference)
    ref = _as_torch(refp, refp.fn(inputs))
    ref = tuple(t.clone() for t in ref) if isinstance(ref, tuple) else ref.clone()
    live: List[Provider] = []
    for p in case.providers:
        try:
            with p.entered():
                res = p.fn(inputs)
            res = _as_torch(p, res)
        except Exception as e:  # noqa: BLE001  report it, time the others
            rows[p.name].error = f"raised {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            continue
        if p.kind == "yardstick":
            rows[p.name].agreement = "not checked (yardstick)"
        elif p.name == case.reference:
            rows[p.name].agreement = "reference"
        else:
            why = case.compare(ref, res, inputs)
            if why is not None and why != TIE_ORDER:
                rows[p.name].error = f"disagrees with {case.reference}: {why}"
                continue
            rows[p.name].agreement = why or EXACT
        live.append(p)
    del ref

    # Warm up, then calibrate each provider's block so it lasts about block_s.
    number: Dict[str, int] = {}
    rounds = settings.repeats
    for p in live:
        with p.entered():
            for _ in range(settings.warmup):
                _sync(p.fn(inputs))
            n = 1
            while True:
                t = min(_time_block(p.fn, inputs, n) for _ in range(2)) * n
                if t >= settings.block_s / 5 or n >= 1 << 20:
                    break
                n *= 4 if t < settings.block_s / 50 else 2
        number[p.name] = max(1, round(n * settings.block_s / max(t, 1e-9)))
        # a very slow provider (one call longer than the case budget allows) gets fewer rounds
        per_call = t / n
        if per_call * rounds * len(live) > settings.max_case_s:
            rounds = max(3, min(rounds, int(settings.max_case_s / (per_call * len(live)))))

    samples: Dict[str, List[float]] = {p.name: [] for p in live}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            # interleave the providers, rotating the order so none always runs first
            order = live[r % len(live):] + live[:r % len(live)] if live else []
            for p in order:
                with p.entered():
                    samples[p.name].append(_time_block(p.fn, inputs, number[p.name]))
                if p.pause_after:
                    time.sleep(p.pause_after)
    finally:
        if gc_was_enabled:
            gc.enable()

    for p in live:
        row = rows[p.name]
        row.q1_s, row.median_s, row.q3_s = quartiles(samples[p.name])
        row.min_s, row.max_s = min(samples[p.name]), max(samples[p.name])
        row.number, row.repeats = number[p.name], rounds
    # Every live row was timed just above: its median is a float.
    medians = {p.name: cast(float, rows[p.name].median_s) for p in live}
    others = [medians[p.name] for p in live
              if p.kind in ("torch", "peer") and rows[p.name].agreement != TIE_ORDER]
    best = min(others) if others else None
    for p in live:
        if best:
            rows[p.name].ratio_best_other = medians[p.name] / best
    return list(rows.values())


# ---------------------------------------------------------------------------------------------
# The machine's memory-copy bandwidth, measured in the same run
# ---------------------------------------------------------------------------------------------

@dataclass
class Bandwidth:
    copy_bytes_per_s: float           # (bytes read + bytes written) / time of dst.copy_(src)
    fresh_bytes_per_s: float          # bytes / time of torch.empty(n).fill_(0) (first touch)
    nbytes: int
    samples: Dict[str, List[float]] = field(default_factory=dict)


def measure_bandwidth(nbytes: int = 1 << 28, repeats: int = 11, device: str = "cpu") -> Bandwidth:
    """Copy bandwidth of ``dst.copy_(src)`` on ``nbytes`` (far larger than any cache), counting
    the bytes read and written, the same way the ideal bytes of a case are counted; and the rate
    at which fresh memory is first written (page faults: what a functional op's new output
    costs with torch's CPU allocator)."""
    n = nbytes // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.zeros(n, dtype=torch.float32, device=device)
    copy_t, fresh_t = [], []
    for _ in range(repeats):
        copy_t.append(_time_block(lambda d: dst.copy_(src), {}, 1))
        fresh_t.append(_time_block(
            lambda d: torch.empty(n, dtype=torch.float32, device=device).fill_(0), {}, 1))

    return Bandwidth(2 * nbytes / statistics.median(copy_t), nbytes / statistics.median(fresh_t),
                     nbytes, {"copy_s": copy_t, "fresh_fill_s": fresh_t})
