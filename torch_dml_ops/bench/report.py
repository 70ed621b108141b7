"""Turning rows into a Markdown summary, a detailed table, JSON and a plot."""
from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import asdict
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

from .core import TIE_ORDER, Row

#: within this factor of the fastest other provider counts as tied
TIE = 1.05
PEER_COLUMNS = ("onnxruntime", "tensorflow", "jax")


def fmt_s(s: Optional[float]) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    ms = s * 1e3
    return f"{ms:.3f} ms" if ms < 10 else f"{ms:.2f} ms" if ms < 100 else f"{ms:.0f} ms"


def by_case(rows: Sequence[Row]) -> "OrderedDict[tuple, List[Row]]":
    out: "OrderedDict[tuple, List[Row]]" = OrderedDict()
    for r in rows:
        out.setdefault((r.op, r.case), []).append(r)
    return out


def _cell(r: Optional[Row]) -> str:
    if r is None:
        return "n/a"
    if r.error:
        return "✗ " + ("disagrees" if r.error.startswith("disagrees") else "error")
    return fmt_s(r.median_s) + (" †" if r.agreement == TIE_ORDER or r.stable is False else "")


def _median(r: Row) -> float:
    """The median of a timed row (``r.timed``: its median is not None)."""
    return cast(float, r.median_s)


def comparable(r: Row) -> bool:
    """A timed torch-native or peer row that computed what ours computes: bit-exact, and (top-k)
    not found unstable on the ties probe."""
    return (r.kind in ("torch", "peer") and r.timed and r.agreement != TIE_ORDER
            and r.stable is not False)


def verdict(group: List[Row]) -> Dict[str, Any]:
    """Ours (the case's first ``ours`` provider) against the fastest comparable provider."""
    ours = next((r for r in group if r.kind == "ours"), None)
    others = [r for r in group if comparable(r)]
    best = min(others, key=_median) if others else None
    res: Dict[str, Any] = {"ours": ours, "best": best, "ratio": None, "place": "n/a"}
    if ours is None or not ours.timed or best is None:
        if ours is not None and ours.error:
            res["place"] = "ours failed"
        return res
    ratio = _median(ours) / _median(best)
    res["ratio"] = ratio
    res["place"] = ("first" if ratio <= 1.0 else "tied" if ratio <= TIE
                    else f"behind {best.provider}")
    return res


def recompute_ratios(rows: Sequence[Row]) -> None:
    """``ratio_best_other`` against comparable providers only (after the stability marking)."""
    for group in by_case(rows).values():
        others = [_median(r) for r in group if comparable(r)]
        best = min(others) if others else None
        for r in group:
            r.ratio_best_other = _median(r) / best if best and r.timed else None


def summary_table(rows: Sequence[Row]) -> str:
    lines = ["| op | case | ours | ours, portable path | best torch-native | onnxruntime | "
             "TensorFlow | JAX | copy limit | ours ÷ best other | place |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for (op, case), group in by_case(rows).items():
        v = verdict(group)
        ours = v["ours"]
        torch_rows = [r for r in group if r.kind == "torch" and r.timed]
        bt = min(torch_rows, key=_median) if torch_rows else None
        bt_s = f"{_cell(bt)} ({bt.provider.replace('torch ', '')})" if bt else "-"
        peer = {lib: next((r for r in group if r.library == lib), None) for lib in PEER_COLUMNS}
        cells = {lib: _cell(peer[lib]) for lib in PEER_COLUMNS}
        # a peer's variant (e.g. onnxruntime without its memory arena) next to its main row
        for lib in PEER_COLUMNS:
            for r in group:
                if r.library == lib and r is not peer[lib] and r.provider.endswith(")"):
                    variant = r.provider[r.provider.rindex("(") + 1:-1]
                    cells[lib] += f" ({variant}: {_cell(r)})"
        limit = group[0].limit_s
        ratio = "-" if v["ratio"] is None else f"{v['ratio']:.2f}"
        portable = next((r for r in group if r.kind == "ours" and r is not ours
                         and r.provider.endswith("[portable]")), None)
        lines.append(
            f"| {op} | {case} | {_cell(ours)} | {_cell(portable) if portable else '-'} | "
            f"{bt_s} | {' | '.join(cells[lib] for lib in PEER_COLUMNS)} | {fmt_s(limit)} | "
            f"{ratio} | {v['place']} |")
    return "\n".join(lines)


def detail_table(rows: Sequence[Row]) -> str:
    lines = ["| op | case | provider | kind | median | IQR (min–max) | ÷ best other | "
             "÷ copy limit | agreement |",
             "|---|---|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        if r.error:
            lines.append(f"| {r.op} | {r.case} | {r.provider} | {r.kind} | - | - | - | - | "
                         f"{r.error} |")
            continue
        spread = f"{fmt_s(r.spread)} ({fmt_s(r.min_s)}–{fmt_s(r.max_s)})"
        ratio = "-" if r.ratio_best_other is None else f"{r.ratio_best_other:.2f}"
        lim = "-" if not r.limit_s else f"{_median(r) / r.limit_s:.1f}"
        name = f"**{r.provider}**" if r.kind == "ours" else r.provider
        lines.append(f"| {r.op} | {r.case} | {name} | {r.kind} | {fmt_s(r.median_s)} | "
                     f"{spread} | {ratio} | {lim} | {r.agreement} |")
    return "\n".join(lines)


def scoreboard(rows: Sequence[Row]) -> List[str]:
    """One line per op: how many large cases ours is first / tied / behind on."""
    out = []
    groups = by_case(rows)
    for op in OrderedDict.fromkeys(r.op for r in rows):
        first = tied = 0
        behind = []
        for (o, case), group in groups.items():
            if o != op or not group[0].large:
                continue
            v = verdict(group)
            if v["place"] == "first":
                first += 1
            elif v["place"] == "tied":
                tied += 1
            elif v["ratio"] is not None:
                behind.append(f"{case} ({v['ratio']:.2f}x {v['best'].provider})")
        line = f"{op}: large cases first {first}, tied {tied}, behind {len(behind)}"
        out.append(line + (": " + "; ".join(behind) if behind else ""))
        yard = yardstick_ratios(rows, op)
        if yard:
            out.append(f"{op}: ours ÷ yardstick, every case that has one: "
                       + "; ".join(f"{case} {ratio:.2f}x" for case, ratio in yard))
    return out


def yardstick_ratios(rows: Sequence[Row], op: str) -> List[Tuple[str, float]]:
    """(case, ours ÷ the case's yardstick) for the op's cases that time one (a floor such as
    one read of the input)."""
    out = []
    for (o, case), group in by_case(rows).items():
        ours = next((r for r in group if r.kind == "ours"), None)
        yard = next((r for r in group if r.kind == "yardstick" and r.timed), None)
        if o == op and ours is not None and ours.timed and yard is not None:
            out.append((case, _median(ours) / _median(yard)))
    return out


def write_json(path: str, meta: Dict[str, object], rows: Sequence[Row]) -> None:
    out = []
    for r in rows:
        d = asdict(r)
        d["iqr_s"] = r.spread
        out.append(d)
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": out}, f, indent=1)


SERIES_ORDER = ("gather_nd element", "gather_nd row", "scatter_nd element", "scatter_nd row",
                "top_k1 k=1", "top_k1 k=16", "top_k1 k=256")


_PEER_COLORS = {"onnxruntime": "#d62728", "tensorflow": "#ff7f0e", "jax": "#9467bd"}
_TORCH_COLORS = ("#2ca02c", "#8c564b", "#7f7f7f", "#17becf", "#bcbd22", "#e377c2")


def _provider_colors(rows: Sequence[Row]) -> Dict[str, str]:
    """One color per provider, the same in every panel: ours blue, each peer its own, torch
    formulations from a muted palette."""
    colors: Dict[str, str] = {}
    n_torch = 0
    for r in rows:
        if r.provider in colors:
            continue
        if r.kind == "ours":
            colors[r.provider] = ("#9ecae1" if r.provider.endswith("[portable]")
                                  else "#1f3fb4" if "out=" in r.provider else "#1f77b4")
        elif r.library in _PEER_COLORS:
            colors[r.provider] = _PEER_COLORS[r.library]
        else:
            colors[r.provider] = _TORCH_COLORS[n_torch % len(_TORCH_COLORS)]
            n_torch += 1
    return colors


def plot(path: str, rows: Sequence[Row], title: str) -> Optional[str]:
    """Time against problem size for every series, with the copy-bandwidth limit.  Returns an
    error string when matplotlib is missing or nothing is plottable, else None."""
    series = [s for s in SERIES_ORDER if any(r.series == s for r in rows)]
    series += sorted({r.series for r in rows if r.series and r.series not in series})
    if not series:
        return "no plot: no scaling series in this run"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        return f"no plot: matplotlib does not import ({type(e).__name__})"
    ncols = 4 if len(series) > 4 else len(series)
    nrows = -(-len(series) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.9 * nrows), squeeze=False)
    colors = _provider_colors(rows)
    for ax, s in zip(axes.flat, series):
        srows = [r for r in rows if r.series == s]
        for prov in OrderedDict.fromkeys(r.provider for r in srows):
            pts = sorted((r.size, _median(r), r.kind) for r in srows
                         if r.provider == prov and r.timed)
            if not pts:
                continue
            ours = pts[0][2] == "ours" and not prov.endswith("[portable]")
            style = dict(color=colors[prov], lw=2.6 if ours else 1.2,
                         marker="o" if ours else "s" if pts[0][2] == "peer" else ".",
                         ms=4 if ours else 3, ls="--" if ours and "out=" in prov else "-")
            ax.plot([p[0] for p in pts], [p[1] * 1e3 for p in pts], label=prov, **style)
        lim = sorted({(r.size, r.limit_s) for r in srows if r.limit_s})
        if lim:
            ax.plot([p[0] for p in lim], [p[1] * 1e3 for p in lim], "k--", lw=1.5,
                    label="copy-bandwidth limit")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(s)
        ax.set_xlabel("row length" if s.startswith("top_k1") else "data elements")
        ax.set_ylabel("median time (ms)")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=6.5, loc="upper left")
    for ax in list(axes.flat)[len(series):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
