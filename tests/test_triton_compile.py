"""Every kind of Triton kernel variant compiles for real GPUs (to PTX and cubin, for sm_80), here,
without a GPU.

The interpreter runs kernels through numpy and accepts code that the GPU compiler rejects (type
promotions, atomics on a dtype, sort of int64 keys); compiling ahead of time for a CUDA target
catches that.  It checks compilation, not behaviour: that is what the interpreter tests do.
"""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

pytestmark = pytest.mark.triton

TARGET_ARCH = 80
_VARIANTS = []      # (test id, kernel module, kernel name, signature, constexprs), filled below
_PTX_OPS = {}       # test id -> the atomic and fence instructions of its PTX (filled by compiled)

# The compiler needs real JITFunctions, so it runs in a child without TRITON_INTERPRET (this test
# session may have it set); one child compiles every variant and reports each result.
_CHILD = r"""
import json, re, sys, warnings
warnings.simplefilter("ignore")
import importlib, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
target = GPUTarget("cuda", %d, 32)
out = {}
ptx_ops = {}
for vid, mod, name, sig, consts in json.load(sys.stdin):
    fn = getattr(importlib.import_module(mod), name)
    # a tuple argument's signature is a tuple of types (JSON brought it as a list)
    full = {a: tuple(t) if isinstance(t, list) else t for a, t in sig.items()}
    full.update({c: "constexpr" for c in consts})
    try:
        k = triton.compile(ASTSource(fn=fn, signature=full, constexprs=consts), target=target)
        out[vid] = "ok" if "cubin" in k.asm and "ptx" in k.asm else "no cubin"
        # the memory-model instructions of the PTX: atomics and fences, predicates dropped
        ptx_ops[vid] = sorted({re.sub(r"^@!?%%p\d+\s+", "", l.strip()).split()[0]
                               for l in k.asm["ptx"].splitlines()
                               if re.search(r"\b(atom|red|fence|membar)\b", l)})
    except Exception as e:
        out[vid] = type(e).__name__ + ": " + str(e)[:2000]
print(json.dumps({"status": out, "ptx_ops": ptx_ops}))
""" % TARGET_ARCH


@pytest.fixture(scope="module")
def compiled():
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    res = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(_VARIANTS),
                         capture_output=True, text=True, env=env, timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(res.stdout.strip().splitlines()[-1])
    results = report["status"]
    _PTX_OPS.update(report["ptx_ops"])
    if results and all("ptxas" in r.lower() or "backend" in r.lower()
                       for r in results.values() if r != "ok") and "ok" not in results.values():
        pytest.skip(f"no CUDA compiler in this triton build: {next(iter(results.values()))}")
    return results


def _variant(vid, mod, name, sig, consts):
    _VARIANTS.append((vid, mod, name, sig, consts))
    return vid


def _dims(k):
    """The signature of a tuple of k scalar arguments (the indexed sizes or strides)."""
    return ["i64"] * k


_GATHER_SIG = {"out_ptr": "*i32", "in_ptr": "*i32", "idx_ptr": "*i64", "flag_ptr": "*i64", "n_tuples": "i64", "per_batch": "i64", "slice_len": "i64",
               "stride_in_batch": "i64", "stride_in_slice": "i64"}


_GM = "torch_dml_ops.triton_kernels.gather_nd"
_SM = "torch_dml_ops.triton_kernels.scatter_nd"
_TM = "torch_dml_ops.triton_kernels.top_k1"

GATHER = [
    # checked gather, int64 indices / unchecked, uint32 indices, 1-byte data / check-only
    # pre-pass, uint64 indices / int32 indices, 2-byte data, 4 coordinates
    _variant(f"gather-{d}-{i}-K{k}-S{sg}-C{c}-M{m}", _GM, "_gather_nd_kernel",
             dict(_GATHER_SIG, out_ptr=d, in_ptr=d, idx_ptr=i, sizes=_dims(k), strides=_dims(k)),
             dict(K=k, SIGNED=sg, CHECK=c, MOVE=m, BLOCK_T=16, BLOCK_S=64))
    for d, i, k, sg, c, m in [("*i32", "*i64", 2, True, True, True),
                              ("*i8", "*u32", 3, False, False, True),
                              ("*i64", "*u64", 1, False, True, False),
                              ("*i16", "*i32", 4, True, True, True)]
]
SCATTER = [
    _variant(f"scatter-{name}", _SM, "_scatter_nd_kernel",
             {"out_ptr": d, "upd_ptr": d, "idx_ptr": "*i64", "sizes": _dims(2),
              "strides": _dims(2), "aux_ptr": aux, "n_tuples": "i64", "slice_len": "i64"},
             dict(K=2, SIGNED=True, MODE=mode, BLOCK_T=16, BLOCK_S=32))
    for name, mode, d, aux in [("check", 0, "*i32", "*i64"), ("claim32", 1, "*i32", "*i32"),
                               ("claim64", 1, "*i32", "*i64"), ("store_winners", 2, "*i16", "*i32"),
                               ("store", 3, "*i8", "*i64"), ("add_f32", 4, "*fp32", "*i64"),
                               ("add_f64", 4, "*fp64", "*i64"), ("add_i64", 4, "*i64", "*i64"),
                               ("add_i32", 4, "*i32", "*i64"), ("max_i32", 5, "*i32", "*i64"),
                               ("min_i64", 6, "*i64", "*i64")]
]
_F32 = dict(IS_FLOAT=True, INF_BITS=0x7F800000, ABS_MASK=0x7FFFFFFF, ZEXT_MASK=0, FLIP=False)
_F16 = dict(IS_FLOAT=True, INF_BITS=0x7C00, ABS_MASK=0x7FFF, ZEXT_MASK=0, FLIP=False)
_U8 = dict(IS_FLOAT=False, INF_BITS=0, ABS_MASK=0, ZEXT_MASK=0xFF, FLIP=False)
_U32 = dict(IS_FLOAT=False, INF_BITS=0, ABS_MASK=0, ZEXT_MASK=0, FLIP=True)
TOPK = [
    _variant(f"top_k1-{name}", _TM, "_top_k1_kernel",
             {"x_ptr": x, "keys_in_ptr": "*i64", "keys_out_ptr": "*i64", "vals_out_ptr": x,
              "idx_out_ptr": "*i64", "n": "i64", "k": "i64", "n_out_per_row": "i64"},
             dict(consts, DESC=desc, FROM_KEYS=fk, FINAL=fin, BLOCK=block))
    for name, x, consts, desc, fk, fin, block in [
        ("f32_onepass_default_block", "*i32", _F32, True, False, True, 1024),
        ("f16_first_stage", "*i16", _F16, False, False, False, 64),
        ("u8_final_from_keys", "*i8", _U8, True, True, True, 64),
        ("u32_stage_from_keys", "*i32", _U32, False, True, False, 64),
    ]
]


@pytest.mark.parametrize("vid", GATHER + SCATTER + TOPK)
def test_kernel_compiles_for_gpu(compiled, vid):
    assert compiled[vid] == "ok", compiled[vid]


_ATOMIC_VARIANTS = [v for v in GATHER + SCATTER
                    if v.endswith("-CTrue-MFalse") or v.endswith("-CTrue-MTrue")
                    or (v.startswith("scatter-") and not v.startswith("scatter-store"))]


@pytest.mark.parametrize("vid", _ATOMIC_VARIANTS)
def test_atomics_are_relaxed_without_fences(compiled, vid):
    """Every atomic (the check flag's min, the claims' max, the add/max/min scatters) needs
    atomicity only: launch order gives the ordering (a later launch, or the host after the
    kernel, reads the result).  So each is a relaxed ``atom``/``red`` and the PTX has no fence
    or membar (triton's default acq_rel atomics order every access around each)."""
    assert compiled[vid] == "ok", compiled[vid]
    ops = _PTX_OPS[vid]
    atomics = [o for o in ops if o.startswith(("atom.", "red."))]
    assert atomics, ops
    assert all(".relaxed." in o for o in atomics), ops
    assert not [o for o in ops if o.startswith(("fence", "membar"))], ops
