"""Compile, for a real GPU, every Triton kernel variant the launchers produce: no GPU needed.

Run as a child process (``python tests/triton_variants.py ARCH``; never under
``TRITON_INTERPRET``).  It installs a stand-in for triton's CUDA driver that reports a GPU of
compute capability ARCH, and turns every launch into triton's own ``warmup`` (compile, do not
run).  The launchers then run as they would on a GPU, with CPU tensors: triton binds the real
arguments, so the variants are the ones a GPU user gets (its specialisation of integers equal to
1 or divisible by 16 and of 16-byte-aligned pointers, the launchers' constexprs and block sizes),
not a hand-written signature.  No kernel runs: outputs stay as allocated (a checked call reads
its untouched "no violation" flag).

It prints one JSON object: for every distinct compiled variant, its kernel, constexprs, argument
types, the registers and local memory (spills) of its cubin (``cuobjdump -res-usage``), and facts
read off its PTX (64-bit divisions, vector loads and stores, atomics and fences); and for each
sweep of sizes, how many variants the sweep compiled.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime import driver  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402


class _CompileOnlyCuda:
    """Just what triton's JIT asks of the active driver to compile for a CUDA target."""

    def __init__(self, arch: int):
        self.target = GPUTarget("cuda", arch, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target

    def get_active_torch_device(self):
        return torch.device("cpu")

    def get_device_interface(self):
        return torch.cuda

    def map_python_to_cpp_type(self, ty):
        return ty


COMPILED: dict = {}      # hash -> (kernel name, CompiledKernel)
LAUNCHES: list = []      # (kernel name, hash) per launch, in order
JITS: dict = {}          # hash -> the JITFunction that compiled it
#: launches that went straight to a compiled kernel (``_common.launch``'s fast path), and those
#: where the JIT would have picked another variant for the same arguments
FAST = {"launches": 0, "mismatches": []}


def _hash(kernel):
    return kernel.hash if hasattr(kernel, "hash") else kernel.metadata.hash


def install(arch: int) -> None:
    from triton.compiler.compiler import CompiledKernel
    driver.set_active(_CompileOnlyCuda(arch))
    torch.cuda.current_device = lambda: 0       # the launch cache keys on the device
    real_run = JITFunction.run

    def compile_only(self, *args, grid, warmup, **kwargs):
        kernel = real_run(self, *args, grid=grid, warmup=True, **kwargs)
        h = _hash(kernel)
        COMPILED.setdefault(h, (self.fn.__name__, kernel))
        JITS[h] = self
        LAUNCHES.append((self.fn.__name__, h))
        return kernel

    def fast_launch(self, grid):
        """The launch cache's way in: check that the JIT, given the same arguments (constexprs
        positionally, as the fast path passes them), picks this very variant."""
        def runner(*args, stream=None):
            FAST["launches"] += 1
            jit = JITS[_hash(self)]
            again = real_run(jit, *args, grid=grid, warmup=True,
                             num_warps=self.metadata.num_warps)
            if _hash(again) != _hash(self):
                FAST["mismatches"].append(jit.fn.__name__)
            LAUNCHES.append((jit.fn.__name__, _hash(self)))
        return runner

    JITFunction.run = compile_only
    CompiledKernel.__getitem__ = fast_launch


# ---------------------------------------------------------------------------------------------
# the calls: what the op kernels hand the launchers
# ---------------------------------------------------------------------------------------------

def _gather(shape, n, k, batch_dims=0, dtype=torch.float32, idx_dtype=torch.int64, check=True,
            move=True, slice_offset=0):
    from torch_dml_ops.triton_kernels.gather_nd import gather_nd_triton
    x = torch.zeros(shape, dtype=dtype)
    if slice_offset:      # a view whose rows start off the 16-byte grid
        x = torch.zeros(shape[:-1] + (shape[-1] + slice_offset,), dtype=dtype)[..., slice_offset:]
    bshape = tuple(shape[:batch_dims])
    idx = torch.zeros(bshape + (n, k), dtype=idx_dtype)
    slice_len = 1
    for s in shape[batch_dims + k:]:
        slice_len *= s
    out = torch.empty(bshape + (n,) + tuple(shape[batch_dims + k:]), dtype=dtype)
    gather_nd_triton(out, x, idx, batch_dims, check, move)


def _scatter(shape, n, k, reduction="none", dtype=torch.float32, idx_dtype=torch.int64,
             check=True, deterministic=False):
    from torch_dml_ops.triton_kernels.scatter_nd import (scatter_nd_check_triton,
                                                          scatter_nd_triton)
    out = torch.zeros(shape, dtype=dtype)
    idx = torch.zeros((n, k), dtype=idx_dtype)
    upd = torch.zeros((n,) + tuple(shape[k:]), dtype=dtype)
    if check:
        scatter_nd_check_triton(list(shape[:k]), idx)
    scatter_nd_triton(out, idx, upd, k, reduction, deterministic)


def _topk(rows, n, k, dtype=torch.float32, largest=True):
    from torch_dml_ops.triton_kernels.top_k1 import top_k1_triton
    x = torch.zeros((rows, n), dtype=dtype)
    top_k1_triton(x, k, 1, largest, torch.int64)


def representative_calls():
    """(name, thunk): the cases a model meets, each kind of launch at least once."""
    calls = []
    for k in range(1, 9):       # element gathers, K coordinates, no batch / a batch
        calls.append((f"gather element K={k}", lambda k=k: _gather((4,) * k, 4096, k)))
        calls.append((f"gather element K={k} unchecked",
                      lambda k=k: _gather((4,) * k, 4096, k, check=False)))
    calls.append(("gather element K=2 batch", lambda: _gather((8, 64, 64), 512, 2, batch_dims=1)))
    calls.append(("gather element K=2 int32 idx", lambda: _gather((64, 64), 4096, 2,
                                                                  idx_dtype=torch.int32)))
    calls.append(("gather element K=3 uint64 idx", lambda: _gather((16, 16, 16), 4096, 3,
                                                                   idx_dtype=torch.uint64)))
    for dt in (torch.float32, torch.bfloat16, torch.int8, torch.float64):
        calls.append((f"gather rows 256 {dt}", lambda dt=dt: _gather((1000, 256), 512, 1,
                                                                    dtype=dt)))
    calls.append(("gather rows 256 f32 misaligned", lambda: _gather((1000, 256), 512, 1,
                                                                   slice_offset=1)))
    calls.append(("gather rows 100 f32", lambda: _gather((1000, 100), 512, 1)))
    calls.append(("gather rows 4096 f32 K=2", lambda: _gather((64, 64, 4096), 512, 2)))
    calls.append(("gather rows out= check", lambda: _gather((1000, 256), 512, 1, move=False)))
    calls.append(("gather rows 256 batch", lambda: _gather((4, 1000, 256), 512, 1,
                                                          batch_dims=1)))
    for red in ("none", "add", "max", "min"):
        for dt in (torch.float32, torch.int64, torch.int32):
            if red in ("max", "min") and dt.is_floating_point:
                continue
            calls.append((f"scatter {red} element {dt}",
                          lambda red=red, dt=dt: _scatter((64, 64), 4096, 2, red, dt)))
            calls.append((f"scatter {red} rows {dt}",
                          lambda red=red, dt=dt: _scatter((1000, 256), 512, 1, red, dt)))
    calls.append(("scatter none rows bf16", lambda: _scatter((1000, 256), 512, 1,
                                                            dtype=torch.bfloat16)))
    for k in range(3, 9):
        calls.append((f"scatter none element K={k}",
                      lambda k=k: _scatter((4,) * k, 4096, k)))
    calls.append(("scatter add float64 element", lambda: _scatter((64, 64), 4096, 2, "add",
                                                                 torch.float64)))
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.uint8,
               torch.uint32):
        calls.append((f"top_k1 4096x1024 k=8 {dt}", lambda dt=dt: _topk(4096, 1024, 8, dt)))
    for rows, n, k in ((4096, 1024, 1), (4096, 1024, 64), (32, 50257, 50), (1, 1_000_000, 10),
                       (1, 1_000_000, 1000), (64, 300, 40), (16384, 256, 256),
                       (1, 4_194_304, 2048)):
        calls.append((f"top_k1 {rows}x{n} k={k}", lambda rows=rows, n=n, k=k: _topk(rows, n, k)))
        calls.append((f"top_k1 {rows}x{n} k={k} smallest",
                      lambda rows=rows, n=n, k=k: _topk(rows, n, k, largest=False)))
    calls.append(("top_k1 4096x1024 k=8 full sort (reference)", _topk_sorting))
    return calls


def _topk_sorting():
    """The same call with the block sorted whole (triton without ``tl.topk``): the reference
    the selection is measured against."""
    from torch_dml_ops.triton_kernels import top_k1 as tm
    tm._stages.cache_clear()
    tm.HAS_TOPK = False
    try:
        _topk(4096, 1024, 8)
    finally:
        tm.HAS_TOPK = True
        tm._stages.cache_clear()


def sweeps():
    """(name, thunks, most variants): calls whose sizes vary call to call as in a serving loop,
    and how many compiled variants the sweep may produce (one per kind of launch it makes: the
    sizes themselves are never specialised)."""
    return [
        ("gather rows, n_tuples 1..300", [lambda n=n: _gather((5000, 128), n, 1, check=False)
                                          for n in range(1, 301, 13)], 1),
        ("gather element, table and n vary", [lambda n=n: _gather((n + 3, 17), 3 * n + 1, 2)
                                              for n in range(1, 300, 23)], 1),
        ("scatter_nd_ rows (KV cache), position 0..300",
         [lambda n=n: _scatter((n + 1, 8, 64), 1, 1, check=False) for n in range(0, 300, 13)], 1),
        ("scatter add, n_tuples 1..300", [lambda n=n: _scatter((999, 64), n, 1, "add")
                                          for n in range(1, 300, 13)], 2),
        # k of one power-of-two bucket: the first stage's variant is shared; the final stage's
        # block is the power of two above the candidates left, and its VEC their parity
        ("top_k1 sampler, k 33..64", [lambda k=k: _topk(8, 50257, k) for k in range(33, 65, 4)],
         1 + 4),
        ("top_k1 batch of rows varies", [lambda r=r: _topk(r, 1000, 8) for r in range(1, 200, 9)],
         1),
    ]


#: The calls the test suite compiles (the rest: ``python tests/triton_variants.py ARCH all``).
SUITE = [
    *[f"gather element K={k}" for k in range(1, 9)],
    "gather element K=2 batch", "gather element K=3 uint64 idx", "gather rows 256 torch.float32",
    "gather rows 256 torch.bfloat16", "gather rows 256 f32 misaligned", "gather rows out= check",
    "gather rows 256 batch",
    "scatter none element torch.float32", "scatter none rows torch.float32",
    "scatter add rows torch.float32", "scatter max element torch.int64",
    "scatter none element K=8",
    "top_k1 4096x1024 k=8 torch.float32", "top_k1 4096x1024 k=8 torch.bfloat16",
    "top_k1 4096x1024 k=1", "top_k1 32x50257 k=50", "top_k1 32x50257 k=50 smallest",
    "gather rows 256 torch.int8", "scatter add element torch.int64",
    "scatter min element torch.int32", "scatter add float64 element",
    "top_k1 4096x1024 k=8 torch.uint8", "top_k1 4096x1024 k=8 torch.uint32",
    "top_k1 4096x1024 k=8 torch.float16", "top_k1 4096x1024 k=8 full sort (reference)",
]


# ---------------------------------------------------------------------------------------------
# reading a compiled variant
# ---------------------------------------------------------------------------------------------

def _bin(name):
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def resources(cubin: bytes, ptx: str, arch: int) -> dict:
    """Registers and local memory of the cubin triton built (``cuobjdump -res-usage``), and the
    spill stores ptxas reports for the PTX (local memory can also be a stack frame)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([_bin("cuobjdump"), "-res-usage", f.name], capture_output=True,
                              text=True, check=True).stdout
    fields = {k.lower(): int(v) for k, v in re.findall(r"(REG|STACK|LOCAL|SHARED):(\d+)", text)}
    with tempfile.NamedTemporaryFile(suffix=".ptx", mode="w") as f:
        f.write(ptx)
        f.flush()
        for name in ("ptxas-blackwell", "ptxas"):     # the one that reads this PTX version
            if not os.path.exists(_bin(name)):
                continue
            r = subprocess.run([_bin(name), f"-arch=sm_{arch}a" if arch >= 90 else f"-arch=sm_{arch}",
                                "-v", "-o", os.devnull, f.name], capture_output=True, text=True)
            m = re.search(r"(\d+) bytes spill stores", r.stdout + r.stderr)
            if r.returncode == 0 and m:
                fields["spill_stores"] = int(m.group(1))
                break
    return fields


def ptx_facts(ptx: str) -> dict:
    ops = [re.sub(r"^@!?%p\d+\s+", "", line.strip()).split()[0]
           for line in ptx.splitlines() if line.strip() and not line.strip().startswith(("//", "."))
           and re.match(r"^(@!?%p\d+\s+)?[a-z]", line.strip())]
    return {
        "div64": sorted({o for o in ops if re.match(r"^(div|rem)\.(s|u)64", o)}),
        "vector_loads": sorted({o for o in ops if re.match(r"^ld\.global.*\.v[24]\.", o)}),
        "vector_stores": sorted({o for o in ops if re.match(r"^st\.global.*\.v[24]\.", o)}),
        "scalar_loads": sum(1 for o in ops if re.match(r"^ld\.global", o) and ".v" not in o),
        "atomics": sorted({o for o in ops if o.startswith(("atom.", "red."))}),
        "fences": sorted({o for o in ops if o.startswith(("fence", "membar"))}),
        "barriers": sum(1 for o in ops if o.startswith(("bar.sync", "barrier.sync", "bar.cta"))),
        "instructions": len(ops),
    }


def _named(src, mapping) -> dict:
    """A triton ASTSource dict keyed by argument (name, or (index, ...) path) -> {name: value}."""
    names = list(src.fn.arg_names)
    out = {}
    for key, value in mapping.items():
        if isinstance(key, tuple):
            key = names[key[0]] + "".join(f"[{i}]" for i in key[1:])
        elif isinstance(key, int):
            key = names[key]
        out[str(key)] = value if isinstance(value, (int, float, bool, str)) else str(value)
    return out


def describe(name, kernel, arch: int) -> dict:
    src = kernel.src
    return {"kernel": name, "constexprs": _named(src, src.constants),
            "signature": _named(src, src.signature), "num_warps": kernel.metadata.num_warps,
            **resources(kernel.asm["cubin"], kernel.asm["ptx"], arch), **ptx_facts(kernel.asm["ptx"])}


def main(arch: int, names=None) -> None:
    install(arch)
    report = {"calls": {}, "variants": {}, "sweeps": {}, "seconds": {}, "suite": SUITE}
    if names == ["suite"]:
        names = SUITE + [name for name, _, _ in sweeps()]
    only = set(names or ()) - {"all"}
    for name, thunk in representative_calls():
        if only and name not in only:
            continue
        start, t0 = len(LAUNCHES), time.perf_counter()
        thunk()
        report["calls"][name] = [h for _, h in LAUNCHES[start:]]
        report["seconds"][name] = round(time.perf_counter() - t0, 2)
    for name, thunks, most in sweeps():
        if only and name not in only:
            continue
        start = len(LAUNCHES)
        for t in thunks:
            t()
        report["sweeps"][name] = {"calls": len(thunks), "most": most,
                                  "variants": len({h for _, h in LAUNCHES[start:]})}
    for h, (name, kernel) in COMPILED.items():
        report["variants"][h] = describe(name, kernel, arch)
    report["fast"] = FAST
    print(json.dumps(report))


if __name__ == "__main__":
    import warnings
    warnings.simplefilter("ignore")
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 90, sys.argv[2:])
