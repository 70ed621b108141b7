"""The benchmark suite: agreement checks, timing rows, reports, and the peers that are installed.

The peers (onnxruntime, TensorFlow, JAX) are never required: their tests skip when they are not
installed, and everything else runs with ``--peers none``.
"""
import importlib.util
import json

import pytest
import torch

from torch_dml_ops import _library, bench
from torch_dml_ops.bench import cases, core, peers, report
from torch_dml_ops.bench.core import TIE_ORDER, Case, Provider, Settings

FAST = Settings(repeats=3, block_s=0.002, warmup=1, max_case_s=2.0)


def _case(providers, reference="ours", **kw):
    def make(seed):
        torch.manual_seed(seed)
        return {"x": torch.randn(100)}
    return Case("toy", "toy", make, providers, reference=reference, **kw)


def test_run_case_checks_before_timing():
    rows = core.run_case(_case([
        Provider("ours", lambda d: d["x"] * 2, kind="ours"),
        Provider("same", lambda d: d["x"] + d["x"]),
        Provider("wrong", lambda d: d["x"] * 3),
        Provider("raises", lambda d: 1 / 0),
        Provider("copy", lambda d: d["x"].clone(), kind="yardstick"),
    ]), FAST)
    by = {r.provider: r for r in rows}
    assert by["ours"].agreement == "reference" and by["ours"].timed
    assert by["same"].agreement == core.EXACT and by["same"].timed
    assert not by["wrong"].timed and "100 elements differ" in by["wrong"].error
    assert not by["raises"].timed and "ZeroDivisionError" in by["raises"].error
    assert by["copy"].timed and by["copy"].agreement.startswith("not checked")
    assert by["same"].ratio_best_other == pytest.approx(1.0)
    assert by["ours"].ratio_best_other == pytest.approx(by["ours"].median_s / by["same"].median_s)
    for r in rows:
        if r.timed:
            assert r.min_s <= r.q1_s <= r.median_s <= r.q3_s <= r.max_s
            assert r.repeats == 3 and r.number >= 1


@pytest.mark.skipif(not _library.extension_loaded(), reason="the C++ extension is not built")
def test_ours_on_the_cpu_runs_the_kernels_users_get():
    """Under ``auto`` "ours" is the C++ kernel the extension registered, not the Python
    re-registration that ``override("native")`` makes (which costs a small call ~1.3 us)."""
    from torch_dml_ops import _backend
    ours, portable = cases._backend_variants("cpu", "x", lambda d: None)
    assert ours.context is None and portable.context is not None
    with _backend.override("torch"):
        ours, _ = cases._backend_variants("cpu", "x", lambda d: None)
    assert ours.context is not None
    with ours.context() as name:
        assert name == "native"


def test_case_rejects_unknown_reference_and_duplicates():
    with pytest.raises(ValueError, match="reference"):
        _case([Provider("a", lambda d: d["x"])], reference="b")
    with pytest.raises(ValueError, match="duplicate"):
        _case([Provider("ours", lambda d: d["x"]), Provider("ours", lambda d: d["x"])])
    with pytest.raises(ValueError, match="kind"):
        Provider("a", lambda d: 0, kind="mine")


def test_topk_compare():
    x = torch.tensor([[3.0, 1.0, 3.0, 2.0, 3.0]])
    d = {"x": x, "k": 2, "largest": True}
    ref = (torch.tensor([[3.0, 3.0]]), torch.tensor([[0, 2]]))
    assert cases.topk_compare(ref, ref, d) is None
    assert cases.topk_compare(ref, (ref[0], torch.tensor([[2, 4]], dtype=torch.int32)), d) \
        == TIE_ORDER
    assert "values differ" in cases.topk_compare(ref, (torch.tensor([[3.0, 2.0]]), ref[1]), d)
    assert "do not point" in cases.topk_compare(ref, (ref[0], torch.tensor([[0, 1]])), d)
    assert "do not point" in cases.topk_compare(ref, (ref[0], torch.tensor([[0, 9]])), d)


def test_every_case_builds_with_unique_names():
    """Building the full suite is cheap (inputs are made only when a case runs)."""
    for op, build in cases.OPS.items():
        built = build(series_sizes=cases.FULL_SERIES[op])
        names = [c.name for c in built]
        assert len(names) == len(set(names)), op
        assert any(c.series for c in built) and any(not c.series for c in built)
        for c in built:
            assert c.provider(c.reference).kind == "ours"


@pytest.mark.parametrize("op", list(cases.OPS))
def test_small_cases_agree(op):
    """Every torch-native formulation reproduces ours on the smallest case of each series."""
    for c in cases.OPS[op](series_sizes=(10,), named=False):
        if c.size > (1 << 10):
            continue
        for r in core.run_case(c, FAST, bandwidth=1e10):
            assert not r.error, (c.name, r.provider, r.error)
            assert r.ideal_bytes > 0 and r.limit_s == pytest.approx(r.ideal_bytes / 1e10)


def test_main_end_to_end(tmp_path, capsys):
    js, md = tmp_path / "r.json", tmp_path / "r.md"
    rc = bench.main(["gather_nd", "scatter_nd", "--no-series", "--case", "small", "--peers",
                     "none", "--quick", "--repeats", "3", "--block-ms", "2", "--copy-mb", "8",
                     "--json", str(js), "--markdown", str(md)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "| gather_nd | small 64x64 k=2 n=128 |" in out
    assert "copy bandwidth" in out
    data = json.loads(js.read_text())
    assert data["meta"]["copy_bandwidth_GBps"] > 0
    ours = [r for r in data["rows"] if r["kind"] == "ours"]
    assert {r["op"] for r in ours} == {"gather_nd", "scatter_nd"}
    assert all(r["median_s"] > 0 and r["error"] == "" for r in ours)
    assert "## Every provider" in md.read_text()
    if _library.extension_loaded():
        # on the CPU, ours runs once per backend: the C++ kernels (first) and the portable path
        names = {r["provider"] for r in ours}
        assert {"tdo.gather_nd", "tdo.gather_nd [portable]", "tdo.scatter_nd",
                "tdo.scatter_nd [portable]"} <= names


def test_main_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        bench.main(["no_such_op"])
    with pytest.raises(SystemExit):
        bench.main(["--peers", "numpy"])
    with pytest.raises(SystemExit):
        bench.main(["--no-series", "--no-named"])


def _rows_for_plot():
    rows = []
    for size in (1 << 10, 1 << 12):
        for prov, kind, lib in (("tdo.gather_nd", "ours", "torch_dml_ops"),
                                ("torch take", "torch", "torch"),
                                ("onnxruntime GatherND", "peer", "onnxruntime")):
            rows.append(core.Row("gather_nd", f"element {size}", prov, kind, lib,
                                 series="gather_nd element", size=size, median_s=size * 1e-8,
                                 q1_s=size * 1e-8, q3_s=size * 1e-8, limit_s=size * 1e-9,
                                 large=True, agreement="exact"))
    return rows


def test_summary_and_scoreboard():
    rows = _rows_for_plot()
    rows[1].median_s = rows[0].median_s / 2      # torch take twice as fast on the first size
    rows[5].median_s = rows[3].median_s / 1.03   # onnxruntime 3% faster on the second
    text = report.summary_table(rows)
    assert "| gather_nd | element 1024 |" in text and "behind torch take" in text
    # no portable variant in these rows: its column shows a dash
    assert "| gather_nd | element 1024 | 10.2 µs | - |" in text
    board = report.scoreboard(rows)
    assert board == ["gather_nd: large cases first 0, tied 1, behind 1: element 1024 "
                     "(2.00x torch take)"]


def test_scoreboard_gives_ours_over_the_yardstick():
    """A case that times a yardstick (top-k: one read of its input) gets ours ÷ it, in the
    scoreboard and per case; a case without one is not listed."""
    rows = _rows_for_plot()
    rows.append(core.Row("gather_nd", "element 1024", "one read", "yardstick", "torch",
                         median_s=(1 << 10) * 0.4e-8, q1_s=0.0, q3_s=0.0, large=True))
    assert report.yardstick_ratios(rows, "gather_nd") == [("element 1024", pytest.approx(2.5))]
    assert report.scoreboard(rows)[1] == ("gather_nd: ours ÷ yardstick, every case that has one: "
                                          "element 1024 2.50x")
    tk = [c for c in cases.top_k1_cases(series_sizes=()) if c.name.startswith("4096x1024 k=8")]
    assert tk and all(any(p.kind == "yardstick" for p in c.providers) for c in tk)


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")
def test_plot_writes_png(tmp_path):
    path = tmp_path / "p.png"
    assert report.plot(str(path), _rows_for_plot(), "title") is None
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_series(tmp_path):
    # Decided before matplotlib is imported: the same answer with or without the bench extra.
    path = tmp_path / "p.png"
    assert report.plot(str(path), [], "t") == "no plot: no scaling series in this run"
    assert not path.exists()


def test_plot_without_matplotlib(tmp_path, monkeypatch):
    # A missing optional extra is reported, never raised (the bench runs without it).
    import builtins
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    path = tmp_path / "p.png"
    msg = report.plot(str(path), _rows_for_plot(), "t")
    assert msg == "no plot: matplotlib does not import (ModuleNotFoundError)"
    assert not path.exists()


@pytest.mark.parametrize("name", peers.PEER_NAMES)
def test_peer_agrees_on_small_cases(name):
    module = {"onnxruntime": "onnxruntime", "tensorflow": "tensorflow", "jax": "jax"}[name]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[bench]')")
    loaded, skipped = peers.load_peers([name], torch.get_num_threads())
    assert not skipped, skipped
    hook = peers.hook(loaded, "cpu")
    todo = (cases.gather_nd_cases(peers=hook, series_sizes=(10,), named=False)[:1]
            + cases.scatter_nd_cases(peers=hook, series_sizes=(10,), named=False)[:1]
            + [c for c in cases.top_k1_cases(peers=hook) if c.name.startswith(cases.PROBE)])
    for c in todo:
        rows = {r.provider: r for r in core.run_case(c, FAST)}
        mine = [r for r in rows.values() if r.library == name]
        assert mine, c.name
        for r in mine:
            assert not r.error, (c.name, r.error)
            assert r.agreement in (core.EXACT, TIE_ORDER)


def test_fresh_bench_times_each_call_and_reports_every_process(capsys, monkeypatch):
    """``python -m torch_dml_ops.bench.fresh`` (issue 41, item 5): each round calls ours,
    torch's and the floor once in a rotated order, every call timed on its own (single calls,
    not blocks: the stalls are what it measures); the table reads each child process's times."""
    import json
    import subprocess
    import torch_dml_ops as tdo
    from torch_dml_ops.bench import fresh
    calls = []

    def case():
        x, idx, upd = torch.randn(64, 8), torch.tensor([[3], [1]]), torch.randn(2, 8)
        return {"ours": lambda: calls.append("ours") or tdo.scatter_nd(x, idx, upd),
                "torch": lambda: calls.append("torch") or x.clone().index_copy_(0, idx[:, 0], upd),
                "floor": lambda: calls.append("floor") or torch.empty(512).fill_(0)}
    monkeypatch.setattr(fresh, "_cases", lambda: {"tiny case": case})
    times = fresh.run_one("tiny case", 4)
    assert {p: len(v) for p, v in times.items()} == {"ours": 4, "torch": 4, "floor": 4}
    assert calls[:6] == ["ours", "torch", "floor", "torch", "floor", "ours"] and len(calls) == 18
    s = fresh.summary({"ours": [1.0, 2.0, 3.0], "torch": [2.0, 2.0, 2.0], "floor": [1.0, 1.0, 4.0]})
    assert (s["ratio"], s["ours_worst"], s["floor_worst"], s["ours_ms"]) == (1.0, 1.5, 4.0, 2000.0)
    children = []

    def fake_run(cmd, **kw):       # a child process, run here
        assert cmd[1:4] == ["-m", "torch_dml_ops.bench.fresh", "--one"], cmd
        children.append(cmd[4])
        return subprocess.CompletedProcess(cmd, 0, json.dumps(fresh.run_one(cmd[4], 2)) + "\n", "")
    monkeypatch.setattr(fresh.subprocess, "run", fake_run)
    threads = str(torch.get_num_threads())
    assert fresh.main(["--processes", "3", "--rounds", "2", "--threads", threads]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| tiny case |")]
    assert children == ["tiny case"] * 3 and len(rows) == 1
    assert len(rows[0].split(" | ")[-1].split(", ")) == 3      # each process's ratio
    monkeypatch.setattr(fresh.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, "", "Traceback: the child's own error\n"))
    with pytest.raises(SystemExit, match="the process timing 'tiny case' failed"):
        fresh.main(["--processes", "1", "--rounds", "2", "--threads", threads])
    assert "the child's own error" in capsys.readouterr().err


def test_gpu_bench_without_a_gpu_says_so(capsys):
    """``python -m torch_dml_ops.bench.gpu`` (the README's GPU numbers) needs CUDA; without it,
    it says so and succeeds."""
    import torch
    from torch_dml_ops.bench import gpu
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the bench would run")
    assert gpu.main([]) == 0
    assert "no CUDA device" in capsys.readouterr().out


def test_percall_table_and_the_bound_leaves_autograd_in_place(capsys, monkeypatch):
    """The per-call table prints every pair; ``--bound`` replaces the Python Autograd kernel
    by a fallthrough only while it measures: afterwards the op records autograd again."""
    from torch_dml_ops.bench import percall
    x = torch.randn(4, 3, requires_grad=True)
    recorded = []

    def fake_timing(fns, rounds):
        recorded.append(torch.ops.torch_dml_ops.gather_nd(x, torch.tensor([[1]])).requires_grad)
        return {name: 1e-6 * (1 + i) for i, name in enumerate(fns)}
    monkeypatch.setattr(percall, "time_interleaved", fake_timing)
    assert percall.main(["--rounds", "1", "--no-compile", "--bound"]) == 0
    table = capsys.readouterr().out
    assert table.count("\n| ") == 2 + 16 + 1       # header, rule, 16 rows, 1 bound row
    assert "bound: gather 128 rows" in table and "requires grad" in table
    assert "permuted [4, 32, 2048, 128] float32 KV cache" in table
    assert recorded == [True] * 8 + [False]         # only the bound ran without autograd
    out = torch.ops.torch_dml_ops.gather_nd(x, torch.tensor([[1]]))
    assert out.grad_fn is not None and out.requires_grad
