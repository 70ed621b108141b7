"""The Triton kernels as a GPU runs them, proven here without a GPU.

``triton_variants.py`` runs the launchers with a stand-in CUDA driver that makes every launch a
compile for a real GPU (sm_80 and sm_90), with triton's own binding of the real arguments: the
variants below are the ones a GPU user gets.  This reads their cubin and PTX: registers and
spills, 64-bit divisions, 16-byte vector accesses, atomics and fences, the selection in top-k;
and counts the variants compiled while sizes change call to call.  What it cannot show is speed:
that is measured on a GPU (docs/benchmarks.md, "Speed on a GPU").

The whole set of calls (big top-k blocks included): ``python tests/triton_variants.py 90 all``.
"""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

pytestmark = pytest.mark.triton

ARCHS = (80, 90)
_SCRIPT = os.path.join(os.path.dirname(__file__), "triton_variants.py")


@pytest.fixture(scope="module")
def reports():
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONWARNINGS"] = "ignore"
    procs = {a: subprocess.Popen([sys.executable, _SCRIPT, str(a), "suite"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for a in ARCHS}
    out = {}
    for a, p in procs.items():
        stdout, stderr = p.communicate(timeout=1200)
        if p.returncode != 0 and ("ptxas" in stderr.lower() or "cuobjdump" in stderr.lower()) \
                and "No such file" in stderr:
            pytest.skip(f"this triton build has no CUDA toolchain: {stderr[-300:]}")
        assert p.returncode == 0, stderr[-4000:]
        out[a] = json.loads(stdout.strip().splitlines()[-1])
    return out


def _variants(report, kernel=None, **consts):
    """The compiled variants of ``kernel`` whose constexprs include ``consts``."""
    return [v for v in report["variants"].values()
            if (kernel is None or v["kernel"] == kernel)
            and all(v["constexprs"].get(k) == c for k, c in consts.items())]


def _describe(v):
    c = v["constexprs"]
    return f"{v['kernel']} {({k: c[k] for k in c if k.isupper()})}"


@pytest.mark.parametrize("arch", ARCHS)
def test_every_call_compiles(reports, arch):
    r = reports[arch]
    suite = r["suite"]    # (not imported here: the script drops TRITON_INTERPRET when imported)
    assert len(suite) >= 30
    assert set(suite) <= set(r["calls"]), set(suite) - set(r["calls"])
    assert all(r["calls"][name] for name in suite)
    assert all(h in r["variants"] for hs in r["calls"].values() for h in hs)


@pytest.mark.parametrize("arch", ARCHS)
def test_element_gathers_and_scatters_fit_in_registers(reports, arch):
    """One element per tuple (the register-heavy case: K coordinates per tuple in flight): at
    most 128 registers (4 warps: 4 blocks per SM) for K up to 8, and no spills."""
    r = reports[arch]
    element = [v for v in r["variants"].values()
               if v["kernel"] in ("_gather_nd_kernel", "_scatter_nd_kernel")
               and v["constexprs"]["BLOCK_S"] == 1]
    assert {v["constexprs"]["K"] for v in element} >= set(range(1, 9))
    too_many = [(_describe(v), v["reg"]) for v in element if v["reg"] > 128]
    assert not too_many


@pytest.mark.parametrize("arch", ARCHS)
def test_no_variant_spills(reports, arch):
    spilling = [(_describe(v), v.get("spill_stores"), v["local"])
                for v in reports[arch]["variants"].values()
                if v.get("spill_stores", 0) or v["local"]]
    assert not spilling


@pytest.mark.parametrize("arch", ARCHS)
def test_no_64_bit_division_without_batch_dims(reports, arch):
    """The batch of a tuple is its ordinal divided by the tuples per batch: a 64-bit division
    (dozens of instructions) that a gather without batch dims must not pay."""
    r = reports[arch]
    unbatched = _variants(r, "_gather_nd_kernel", HAS_BATCH=False)
    assert unbatched
    assert not [_describe(v) for v in unbatched if v["div64"]]
    assert all(v["div64"] for v in _variants(r, "_gather_nd_kernel", HAS_BATCH=True,
                                               MOVE=True))
    assert not [_describe(v) for v in r["variants"].values()
                if v["kernel"] != "_gather_nd_kernel" and v["div64"]]


@pytest.mark.parametrize("arch", ARCHS)
def test_aligned_rows_move_in_16_byte_words(reports, arch):
    """Rows whose starts are 16-byte aligned (VEC elements of 16 bytes) load and store in
    16-byte words (the add scatter's atomics too, on sm_90); unaligned ones (a view one element
    in) fall back to narrower accesses."""
    r = reports[arch]
    wide = [v for v in r["variants"].values()
            if v["kernel"] in ("_gather_nd_kernel", "_scatter_nd_kernel")
            and v["constexprs"].get("MOVE", True) and v["constexprs"].get("MODE", 2) >= 2
            and v["constexprs"]["VEC"] * _element_size(v) == 16]
    assert len(wide) >= 4, [_describe(v) for v in wide]
    for v in wide:
        assert any(o.endswith((".v4.b32", ".v2.b64", ".v4.u32", ".v2.u64")) for o in
                   v["vector_loads"]), (_describe(v), v["vector_loads"])
        if v["constexprs"].get("MODE", 2) >= 4 and arch < 90:
            continue     # vector atomics (red.v4.f32 and such) are sm_90's
        writes = v["vector_stores"] + [a for a in v["atomics"] if ".v" in a]
        assert writes, (_describe(v), v["atomics"])
    misaligned = r["calls"]["gather rows 256 f32 misaligned"]
    assert all(r["variants"][h]["constexprs"]["VEC"] == 1 for h in misaligned)


def _element_size(v):
    return {"*i8": 1, "*u8": 1, "*i16": 2, "*fp16": 2, "*bf16": 2, "*i32": 4, "*fp32": 4,
            "*i64": 8, "*fp64": 8}[v["signature"]["out_ptr"]]


@pytest.mark.parametrize("arch", ARCHS)
def test_atomics_are_relaxed_without_fences(reports, arch):
    """Every atomic (the check flag's min, the claims' max, the add/max/min scatters) needs
    atomicity only: launch order gives the ordering.  Triton's default (acq_rel) would fence
    every access."""
    r = reports[arch]
    with_atomics = [v for v in r["variants"].values() if v["atomics"]]
    assert len(with_atomics) >= 5
    for v in with_atomics:
        assert all(".relaxed." in a for a in v["atomics"]), (_describe(v), v["atomics"])
    assert not [(_describe(v), v["fences"]) for v in r["variants"].values() if v["fences"]]


@pytest.mark.parametrize("arch", ARCHS)
def test_top_k_selects_without_sorting_the_block(reports, arch):
    """k=8 of 1024 keys: the selection (``tl.topk`` over 8 keys) against the same call sorting
    the whole block; k=1 is a max reduction."""
    r = reports[arch]
    select = [r["variants"][h] for h in r["calls"]["top_k1 4096x1024 k=8 torch.float32"]]
    sort = [r["variants"][h] for h in r["calls"]["top_k1 4096x1024 k=8 full sort (reference)"]]
    assert [v["constexprs"]["SELECT"] for v in select] == [True]
    assert [v["constexprs"]["SELECT"] for v in sort] == [False]
    assert select[0]["instructions"] < 0.6 * sort[0]["instructions"], (select, sort)
    assert select[0]["barriers"] < sort[0]["barriers"]
    one = [r["variants"][h] for h in r["calls"]["top_k1 4096x1024 k=1"]]
    assert [v["constexprs"]["KP"] for v in one] == [1]
    assert one[0]["instructions"] < 0.25 * sort[0]["instructions"]


@pytest.mark.parametrize("arch", ARCHS)
def test_changing_sizes_do_not_recompile(reports, arch):
    """Sizes are never specialised and blocks depend on power-of-two buckets: a serving loop
    whose sizes change every call compiles one variant per kind of launch."""
    sweeps = reports[arch]["sweeps"]
    assert len(sweeps) >= 6
    over = {name: s for name, s in sweeps.items() if s["variants"] > s["most"]}
    assert not over


@pytest.mark.parametrize("arch", ARCHS)
def test_launch_cache_picks_the_variant_the_jit_would(reports, arch):
    """After a variant's first launch, ``_common.launch`` calls triton's compiled kernel
    directly; for every such launch the child asked the JIT which variant the same arguments
    bind to, and it was the same."""
    fast = reports[arch]["fast"]
    assert fast["launches"] >= 100
    assert fast["mismatches"] == []
