"""The benchmark cases: the problems named in the op issues, and the scaling series.

Every case holds this package's providers, the torch-native formulations of the same computation,
and (added by ``peers.py``) the other libraries' providers.  Inputs are float32 data and int64
indices (the dtype every peer accepts), made with ``torch.manual_seed(seed)``.

Sizes of the series are the elements of the data tensor ``N``:

* gather, element layout: data ``[2^ceil(p/2), 2^floor(p/2)]``, ``N/4`` random pairs (k = 2);
* gather, row layout: data ``[N/256, 256]``, ``N/1024`` random rows (k = 1);
* scatter: the same layouts, ``N/4`` unique pairs / ``N/1024`` unique rows, functional form;
* top-k: ``2^22`` elements as rows of length ``L`` (``[2^22/L, L]``), k in {1, 16, 256}.
"""
from __future__ import annotations

import functools

import math
from typing import Callable, Dict, List, Optional, Sequence

import torch

import torch_dml_ops as tdo
from torch_dml_ops._forms import row_major_strides
from torch_dml_ops._library import extension_loaded

from .core import TIE_ORDER, Case, Inputs, Provider

# ---------------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------------


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _lin(d: Inputs) -> torch.Tensor:
    """Linear row numbers of the index tuples (the fastest torch formulation: an add chain)."""
    idx, st, k = d["idx"], d["stride_list"], d["k"]
    lin = idx[:, k - 1]
    for j in range(k - 2, -1, -1):
        lin = torch.add(lin, idx[:, j], alpha=st[j])
    return lin


def _cols(d: Inputs):
    return tuple(d["idx"][:, j] for j in range(d["k"]))


def _rows(t: torch.Tensor, d: Inputs) -> torch.Tensor:
    return t.view(-1, d["slice_len"])


def _backend_variants(device: str, name: str, fn: Callable[[Inputs], object]) -> List[Provider]:
    """Our providers, one per backend that runs on ``device``: on the CPU the C++ kernels (what
    ``auto`` picks there, so listed first and named plainly) and the portable torch path; on a
    GPU the Triton kernel and the portable path.  The first one is "ours" in the tables.  The
    backend is switched around each block of calls (``Provider.context``), never inside one;
    not for the C++ kernels under ``auto``, which are those the extension registered itself (an
    override would time its Python re-registration of them, ~1.3 us a call, that users never
    run)."""
    if device == "cpu":
        if not extension_loaded():
            return [Provider(name, fn, kind="ours", library="torch_dml_ops")]
        variants = (("native", name), ("torch", f"{name} [portable]"))
    else:
        variants = (("triton", f"{name} [triton]"), ("torch", f"{name} [portable]"))
    as_is = "native" if tdo._backend.current_backend() == "auto" else None
    return [Provider(label, fn, kind="ours", library="torch_dml_ops",
                     context=None if backend == as_is
                     else functools.partial(tdo._backend.override, backend))
            for backend, label in variants]


PeerHook = Callable[[str, Dict[str, object]], List[Provider]]


def _no_peers(op: str, spec: Dict[str, object]) -> List[Provider]:
    return []


# ---------------------------------------------------------------------------------------------
# gather_nd
# ---------------------------------------------------------------------------------------------

def gather_inputs(shape: Sequence[int], n: int, k: int, device: str = "cpu",
                  with_out: bool = False) -> Callable[[int], Inputs]:
    shape = tuple(shape)

    def make(seed: int) -> Inputs:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(shape, generator=g, dtype=torch.float32)
        cols = [torch.randint(0, shape[j], (n,), generator=g, dtype=torch.int64)
                for j in range(k)]
        idx = torch.stack(cols, dim=1).contiguous()
        slice_shape = shape[k:]
        d: Inputs = {"x": x.to(device), "idx": idx.to(device), "k": k,
                     "slice_len": math.prod(slice_shape),
                     "stride_list": row_major_strides(shape[:k]), "out_shape": (n,) + slice_shape}
        if with_out:
            d["out"] = torch.empty((n,) + slice_shape, dtype=x.dtype, device=device)
        return d
    return make


def _gout(d: Inputs) -> torch.Tensor:
    """Our own preallocated output (allocated on first use, outside the timing)."""
    if "_gout" not in d:
        d["_gout"] = torch.empty(d["out_shape"], dtype=d["x"].dtype, device=d["x"].device)
    return d["_gout"]


def _gather_ideal(d: Inputs) -> int:
    """Read the indices, read the gathered slices, write them."""
    out_bytes = math.prod(d["out_shape"]) * d["x"].element_size()
    return _nbytes(d["idx"]) + 2 * out_bytes


def _g_index_select(d: Inputs) -> torch.Tensor:
    src = _rows(d["x"], d)
    if "out" in d:
        torch.index_select(src, 0, _lin(d), out=_rows(d["out"], d))
        return d["out"]
    return src.index_select(0, _lin(d)).view(d["out_shape"])


def _gather_providers(device: str, with_out: bool, element: bool) -> List[Provider]:
    if with_out:
        ours = _backend_variants(device, "tdo.gather_nd(out=)",
                                 lambda d: tdo.gather_nd(d["x"], d["idx"], out=d["out"]))
    else:
        ours = _backend_variants(device, "tdo.gather_nd",
                                 lambda d: tdo.gather_nd(d["x"], d["idx"]))
    ps = ours + [Provider("torch linearize+index_select", _g_index_select)]
    if not with_out:   # advanced indexing and take have no out= form
        ps.append(Provider("torch adv-index", lambda d: d["x"][_cols(d)]))
        if element:
            ps.append(Provider("torch take", lambda d: torch.take(d["x"], _lin(d))))
    return ps


def gather_nd_cases(device: str = "cpu", peers: PeerHook = _no_peers,
                    series_sizes: Sequence[int] = (), named: bool = True) -> List[Case]:
    cases = []
    if named:
        specs = [
            # name, input shape, n tuples, k, with out=, large
            ("element 4096x4096 k=2 n=1M", (4096, 4096), 1_000_000, 2, False, True),
            ("row 100000x256 k=1 n=64K", (100_000, 256), 65_536, 1, False, True),
            ("row 100000x256 k=1 n=64K out=", (100_000, 256), 65_536, 1, True, True),
            ("4d 8x64x64x64 k=3 n=32K", (8, 64, 64, 64), 32_768, 3, False, False),
            ("small 64x64 k=2 n=128", (64, 64), 128, 2, False, False),
        ]
        for name, shape, n, k, with_out, large in specs:
            ps = _gather_providers(device, with_out, element=len(shape) == k)
            if not with_out:
                ps += peers("gather_nd", {"k": k, "no_arena": large})
            cases.append(Case(
                "gather_nd", name, gather_inputs(shape, n, k, device, with_out), ps,
                reference=ps[0].name, ideal_bytes=_gather_ideal, large=large,
                note="out=: ours and index_select write into one preallocated buffer"
                     if with_out else ""))
    for layout in ("element", "row"):
        for p in series_sizes:
            N = 1 << p
            if layout == "element":
                shape, n, k = (1 << (p - p // 2), 1 << (p // 2)), N // 4, 2
            else:
                shape, n, k = (N // 256, 256), max(1, N // 1024), 1
            ps = _gather_providers(device, False, element=layout == "element")
            ps += _backend_variants(device, "tdo.gather_nd(out=)",
                                    lambda d: tdo.gather_nd(d["x"], d["idx"], out=_gout(d)))
            ps += peers("gather_nd", {"k": k})
            cases.append(Case(
                "gather_nd", f"{layout} 2^{p} ({'x'.join(map(str, shape))}, n={n})",
                gather_inputs(shape, n, k, device), ps, reference=ps[0].name,
                series=f"gather_nd {layout}", size=N, ideal_bytes=_gather_ideal,
                large=N >= 1 << 22))
    return cases


# ---------------------------------------------------------------------------------------------
# scatter_nd
# ---------------------------------------------------------------------------------------------

def scatter_inputs(shape: Sequence[int], n: int, k: int, device: str = "cpu"
                   ) -> Callable[[int], Inputs]:
    shape = tuple(shape)

    def make(seed: int) -> Inputs:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(shape, generator=g, dtype=torch.float32)
        space = math.prod(shape[:k])
        flat = torch.randperm(space, generator=g)[:n]              # unique tuples
        cols = []
        for size in reversed(shape[:k]):
            cols.append(flat % size)
            flat = flat // size
        idx = torch.stack(cols[::-1], dim=1).contiguous()
        slice_shape = shape[k:]
        upd = torch.randn((n,) + slice_shape, generator=g, dtype=torch.float32)
        return {"x": x.to(device), "idx": idx.to(device), "upd": upd.to(device), "k": k,
                "slice_len": math.prod(slice_shape), "stride_list": row_major_strides(shape[:k]),
                "bufs": {}}
    return make


def _buf(d: Inputs, name: str) -> torch.Tensor:
    """A per-provider destination holding the input, allocated once (no page faults timed)."""
    bufs = d["bufs"]
    if name not in bufs:
        bufs[name] = d["x"].clone()
    return bufs[name]


def _scatter_ideal(d: Inputs) -> int:
    """Functional / out=: copy the data (read + write), read the indices and the updates."""
    return 2 * _nbytes(d["x"]) + _nbytes(d["idx"]) + _nbytes(d["upd"])


def _scatter_ideal_inplace(d: Inputs) -> int:
    """In place: read the indices and the updates, write the updates."""
    return _nbytes(d["idx"]) + 2 * _nbytes(d["upd"])


def _s_upd_rows(d: Inputs) -> torch.Tensor:
    return d["upd"].view(-1, d["slice_len"])


def _scatter_functional(device: str) -> List[Provider]:
    return _backend_variants(device, "tdo.scatter_nd",
                             lambda d: tdo.scatter_nd(d["x"], d["idx"], d["upd"])) + [
        Provider("torch clone+index_put_",
                 lambda d: d["x"].clone().index_put_(_cols(d), d["upd"])),
        Provider("torch clone+index_copy_",
                 lambda d: _rows(d["x"].clone(), d).index_copy_(0, _lin(d), _s_upd_rows(d))
                 .view(d["x"].shape)),
    ]


def scatter_nd_cases(device: str = "cpu", peers: PeerHook = _no_peers,
                     series_sizes: Sequence[int] = (), named: bool = True) -> List[Case]:
    cases = []
    specs = [
        ("element 4096x4096 k=2 n=1M", (4096, 4096), 1_000_000, 2, True),
        ("row 100000x256 k=1 n=64K", (100_000, 256), 65_536, 1, True),
        ("4d 8x64x64x64 k=3 n=32K", (8, 64, 64, 64), 32_768, 3, False),
        ("small 64x64 k=2 n=128", (64, 64), 128, 2, False),
    ]
    for name, shape, n, k, large in (specs if named else []):
        make = scatter_inputs(shape, n, k, device)
        # Every named functional scatter also against onnxruntime without its arena (whose
        # outputs are fresh memory, like ours); the place is still judged against the fastest
        # provider, the arena's session included.
        ps = _scatter_functional(device) + peers("scatter_nd", {"k": k, "no_arena": True})
        cases.append(Case("scatter_nd", name, make, ps, reference=ps[0].name,
                          ideal_bytes=_scatter_ideal, large=large))
        if name.startswith("small"):
            continue
        into = _backend_variants(
            device, "tdo.scatter_nd(out=)",
            lambda d: tdo.scatter_nd(d["x"], d["idx"], d["upd"], out=_buf(d, "ours"))) + [
            Provider("torch copy_+index_copy_",
                     lambda d: _rows(_buf(d, "ic").copy_(d["x"]), d)
                     .index_copy_(0, _lin(d), _s_upd_rows(d)).view(d["x"].shape)),
            Provider("torch copy_+index_put_",
                     lambda d: _buf(d, "ip").copy_(d["x"]).index_put_(_cols(d), d["upd"])),
        ]
        cases.append(Case("scatter_nd", name + " out=", make, into, reference=into[0].name,
                          ideal_bytes=_scatter_ideal, large=large,
                          note="out=: every provider writes into its own preallocated buffer"))
        inplace = _backend_variants(
            device, "tdo.scatter_nd_",
            lambda d: tdo.scatter_nd_(_buf(d, "ours"), d["idx"], d["upd"])) + [
            Provider("torch index_copy_",
                     lambda d: _rows(_buf(d, "ic"), d).index_copy_(0, _lin(d), _s_upd_rows(d))
                     .view(d["x"].shape)),
            Provider("torch index_put_",
                     lambda d: _buf(d, "ip").index_put_(_cols(d), d["upd"])),
            Provider("copy of the updates' bytes",
                     lambda d: _buf(d, "cp").view(-1)[:d["upd"].numel()].copy_(d["upd"].view(-1)),
                     kind="yardstick"),
        ]
        cases.append(Case("scatter_nd", name + " in-place", make, inplace,
                          reference=inplace[0].name, ideal_bytes=_scatter_ideal_inplace,
                          large=large,
                          note="in place: the yardstick is a contiguous copy of the bytes the "
                               "scatter writes"))
    for layout in ("element", "row"):
        for p in series_sizes:
            N = 1 << p
            if layout == "element":
                shape, n, k = (1 << (p - p // 2), 1 << (p // 2)), N // 4, 2
            else:
                shape, n, k = (N // 256, 256), max(1, N // 1024), 1
            ps = _scatter_functional(device)
            ps += _backend_variants(
                device, "tdo.scatter_nd(out=)",
                lambda d: tdo.scatter_nd(d["x"], d["idx"], d["upd"], out=_buf(d, "ours")))
            ps += peers("scatter_nd", {"k": k})
            cases.append(Case(
                "scatter_nd", f"{layout} 2^{p} ({'x'.join(map(str, shape))}, n={n})",
                scatter_inputs(shape, n, k, device), ps, reference=ps[0].name,
                series=f"scatter_nd {layout}", size=N, ideal_bytes=_scatter_ideal,
                large=N >= 1 << 22))
    return cases


# ---------------------------------------------------------------------------------------------
# top_k1
# ---------------------------------------------------------------------------------------------

def topk_inputs(shape: Sequence[int], k: int, largest: bool, ties: int = 0,
                device: str = "cpu") -> Callable[[int], Inputs]:
    """float32 data: normal, or (``ties`` > 0) the integers 0 .. ties-1, so values repeat."""
    def make(seed: int) -> Inputs:
        g = torch.Generator().manual_seed(seed)
        if ties:
            x = torch.randint(0, ties, tuple(shape), generator=g, dtype=torch.int32).float()
        else:
            x = torch.randn(tuple(shape), generator=g, dtype=torch.float32)
        return {"x": x.to(device), "k": k, "largest": largest}
    return make


def _topk_ideal(d: Inputs) -> int:
    """Read the data once, write k values and k int64 indices per row."""
    x = d["x"]
    rows = x.numel() // x.shape[-1]
    return _nbytes(x) + rows * d["k"] * (x.element_size() + 8)


def topk_compare(ref, res, d: Inputs) -> Optional[str]:
    """Values must be bit-exact; indices exact, or (an unstable top-k) pointing at equal values."""
    (rv, ri), (v, i) = ref, res
    if tuple(v.shape) != tuple(rv.shape) or tuple(i.shape) != tuple(ri.shape):
        return f"shape {tuple(v.shape)}/{tuple(i.shape)}, expected {tuple(rv.shape)}"
    v, i = v.to(rv.device, rv.dtype), i.to(ri.device, torch.int64)
    if not torch.equal(v, rv):
        return f"{int((v != rv).sum())} of {rv.numel()} values differ"
    if torch.equal(i, ri.to(torch.int64)):
        return None
    n = d["x"].shape[-1]
    if bool(((i < 0) | (i >= n)).any()) or not torch.equal(d["x"].gather(-1, i), rv):
        return "indices do not point at the values"
    return TIE_ORDER


def _tk_ours(d: Inputs):
    r = tdo.top_k1(d["x"], d["k"], -1, "decreasing" if d["largest"] else "increasing")
    return r.values, r.indices


def _tk_sort(d: Inputs):
    v, i = torch.sort(d["x"], dim=-1, descending=d["largest"], stable=True)
    return v[..., :d["k"]], i[..., :d["k"]]


def _tk_topk(d: Inputs):
    return tuple(torch.topk(d["x"], d["k"], dim=-1, largest=d["largest"]))


def _topk_case(shape, k, largest, device, peers: PeerHook, ties=0, series="", size=0,
               large=False, name=None) -> Case:
    name = name or (f"{'x'.join(map(str, shape))} k={k}"
                    f"{f' values 0..{ties - 1}' if ties else ''} "
                    f"{'largest' if largest else 'smallest'}")
    ps = _backend_variants(device, "tdo.top_k1", _tk_ours) + [
        Provider("torch.topk", _tk_topk),
        Provider("torch.sort(stable)+slice", _tk_sort),
        # a top-k cannot be faster than one read of its input
        Provider("one read (x.amax(-1))", lambda d: d["x"].amax(-1), kind="yardstick"),
    ] + peers("top_k1", {"largest": largest})
    return Case("top_k1", name, topk_inputs(shape, k, largest, ties, device), ps,
                reference=ps[0].name, series=series, size=size, ideal_bytes=_topk_ideal,
                large=large, compare=topk_compare)


PROBE = "ties probe 64x300 values 0..3 k=40"
TOPK_SERIES_ELEMENTS = 1 << 22
TOPK_SERIES_K = (1, 16, 256)


def top_k1_cases(device: str = "cpu", peers: PeerHook = _no_peers,
                 series_sizes: Sequence[int] = (), named: bool = True,
                 directions: Sequence[bool] = (True, False)) -> List[Case]:
    cases = []
    if named:
        # Values 0..3 in rows of 300: every row has ties across the k-th boundary and inside
        # the k.  Tells which top-k providers keep the order (report: "stable").
        for largest in directions:
            cases.append(_topk_case((64, 300), 40, largest, device, peers, ties=4,
                                    name=PROBE + (" largest" if largest else " smallest")))
        specs = [((1, 1_000_000), k, 0, True) for k in (1, 10, 100, 1000)]
        specs += [((4096, 1024), k, 0, True) for k in (1, 8, 64)]
        specs += [((32, 50257), 50, 0, True), ((4096, 1024), 8, 16, True)]
        for shape, k, ties, large in specs:
            for largest in directions:
                cases.append(_topk_case(shape, k, largest, device, peers, ties, large=large))
    for k in TOPK_SERIES_K:
        for p in series_sizes:
            L = 1 << p
            if k > L:
                continue
            shape = (TOPK_SERIES_ELEMENTS // L, L)
            cases.append(_topk_case(shape, k, True, device, peers, series=f"top_k1 k={k}",
                                    size=L, large=True,
                                    name=f"rows of 2^{p} ({shape[0]}x{L}) k={k} largest"))
    return cases


OPS: Dict[str, Callable[..., List[Case]]] = {
    "gather_nd": gather_nd_cases,
    "scatter_nd": scatter_nd_cases,
    "top_k1": top_k1_cases,
}

#: Series sizes (log2): gather/scatter data elements, top-k row lengths.
FULL_SERIES = {"gather_nd": range(10, 25), "scatter_nd": range(10, 25),
               "top_k1": range(8, 23, 2)}
QUICK_SERIES = {"gather_nd": (10, 14, 18, 22), "scatter_nd": (10, 14, 18, 22),
                "top_k1": (12, 16, 20)}
