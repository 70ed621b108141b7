"""Deployable without Python: one AOTInductor package of a module that calls every op through
the public functions, run by ``aoti_load_package`` in this process and by a C++ program (source
``tests/deploy/run_package.cpp``) that links libtorch and ``torch_dml_ops/_C.abi3.so`` and has no
Python in it; both compared bit for bit with eager.

Costs: the package is compiled once for the module (AOTInductor, ~10-20 s), the C++ program once
per session (~10 s: one object, two links; the second link, without our extension, is the
negative control).
"""
import os
import re
import shutil
import subprocess

import pytest
import torch

import torch_dml_ops as tdo
from torch_dml_ops import _library

pytestmark = pytest.mark.compile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "deploy", "run_package.cpp")
RUNS = 2   # the cache buffer carries its state from one run to the next
#: torch dtype <-> c10's name for it (c10::toString), the C++ program's dtype field.
C10_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
             torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int",
             torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool",
             torch.uint16: "UInt16", torch.uint32: "UInt32", torch.uint64: "UInt64"}
DTYPES = {name: dtype for dtype, name in C10_NAMES.items()}


class Deploy(torch.nn.Module):
    """Every op, as a user calls it; a KV-cache-like buffer updated in place."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(6, 4))

    def forward(self, x, rows, slots):
        g = tdo.gather_nd(x, rows)                               # int32 indices
        tdo.scatter_nd_(self.cache, slots, g[:, :4], "add")      # in place, kept across runs
        s = tdo.scatter_nd(x, rows, g * 2)                       # functional
        top = tdo.top_k1(x, 3)                                   # default index_dtype (int64)
        top32 = tdo.top_k1(x, 2, axis=0, index_dtype=torch.int32)
        top_op = torch.ops.torch_dml_ops.top_k1(x, 4)             # the op's default: None
        return (g, self.cache.clone(), s, top.values, top.indices, top32.values, top32.indices,
                top_op[0], top_op[1])


def _inputs():
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(0))
    x[1, 2:5] = 0.5          # ties: the lower index first
    x[3, 6] = -0.0
    return x, torch.tensor([[2], [0]], dtype=torch.int32), torch.tensor([[1], [4]])


def _bits(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def assert_same_bits(got, want):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert (g.dtype, g.shape) == (w.dtype, w.shape), f"output {i}"
        assert torch.equal(_bits(g), _bits(w)), f"output {i}: {g} != {w}"


def _compiler():
    for name in (os.environ.get("CXX"), "g++", "c++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """(path of the .pt2, inputs, eager outputs of RUNS successive runs)."""
    if not _compiler():
        pytest.skip("no C++ compiler (g++ / c++ / $CXX): AOTInductor compiles the package with one")
    args = _inputs()
    ep = torch.export.export(Deploy(), args)
    path = torch._inductor.aoti_compile_and_package(
        ep, package_path=str(tmp_path_factory.mktemp("aoti") / "deploy.pt2"))
    eager = Deploy()
    want = [[t.clone() for t in eager(*args)] for _ in range(RUNS)]
    return path, args, want


def test_aoti_package_runs_in_python_and_matches_eager(package):
    path, args, want = package
    runner = torch._inductor.aoti_load_package(path)
    got = [list(runner(*args)) for _ in range(RUNS)]
    for g, w in zip(got, want):
        assert_same_bits(g, w)
    assert not torch.equal(got[0][1], got[1][1])    # the cache kept the first run's update


# ------------------------------------------------------------------------------ C++ program

@pytest.fixture(scope="session")
def programs(tmp_path_factory):
    """{"with": the program linked with our extension, "without": linked without it}."""
    cxx = _compiler()
    if not cxx:
        pytest.skip("no C++ compiler (g++ / c++ / $CXX) to build the deployment program")
    if not _library.extension_loaded():
        pytest.skip(f"the C++ extension is not loaded: {_library.EXTENSION_ERROR}")
    torch_dir = os.path.dirname(torch.__file__)
    lib = os.path.join(torch_dir, "lib")
    ext_dir, ext_name = os.path.split(_library.extension_path())
    out = tmp_path_factory.mktemp("deploy_build")
    obj = str(out / "run_package.o")
    _check_call([cxx, "-std=c++20", "-O0",
                 f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
                 "-I", os.path.join(torch_dir, "include"), "-c", SOURCE, "-o", obj])
    torch_libs = ["-L", lib, "-ltorch", "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{lib}"]
    # --no-as-needed: the program names no symbol of the extension; it must still be loaded,
    # since its static initializers define the ops.
    ours = ["-L", ext_dir, f"-l:{ext_name}", f"-Wl,-rpath,{ext_dir}"]
    built = {}
    for name, extra in (("with", ours), ("without", [])):
        built[name] = str(out / f"run_package_{name}")
        _check_call([cxx, obj, "-o", built[name], "-Wl,--no-as-needed", *extra, *torch_libs])
    return built


def _check_call(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr[-4000:]}"


def _spread_strides(shape):
    """Strides of a view with the same values and a gap after every element (as ``ids[:, 0]``
    of a two-column ``ids``): not the example inputs' (contiguous) strides."""
    strides, step = [], 2
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return strides[::-1]


def _write_inputs(folder, tensors, strided=()):
    """The program's input files; the inputs numbered in ``strided`` are to be built as strided
    views (the values the same)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "inputs.txt"), "w") as header:
        for i, t in enumerate(tensors):
            line = f"{C10_NAMES[t.dtype]} {t.dim()} {' '.join(map(str, t.shape))}"
            if i in strided:
                line += f" strides {' '.join(map(str, _spread_strides(t.shape)))}"
            header.write(line + "\n")
            with open(os.path.join(folder, f"in{i}.bin"), "wb") as f:
                f.write(_bits(t).numpy().tobytes())


def _read_outputs(folder, run):
    tensors = []
    with open(os.path.join(folder, f"outputs{run}.txt")) as header:
        for i, line in enumerate(header.read().splitlines()):
            name, ndim, *sizes = line.split()
            assert int(ndim) == len(sizes)
            dtype, shape = DTYPES[name], [int(s) for s in sizes]
            with open(os.path.join(folder, f"out{run}_{i}.bin"), "rb") as f:
                data = f.read()
            t = torch.empty(shape, dtype=dtype)
            assert len(data) == t.numel() * t.element_size(), f"out{run}_{i}.bin"
            if data:
                t = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)
            tensors.append(t)
    return tensors


def _run(program, path, folder, env=None, options=()):
    return subprocess.run([program, path, str(folder), str(RUNS), *options], capture_output=True,
                          text=True, env=env, timeout=300, check=False)


def test_cpp_program_links_no_python_and_needs_the_extension(programs, package, tmp_path):
    ldd = shutil.which("ldd")
    if ldd:
        deps = subprocess.run([ldd, programs["with"]], capture_output=True, text=True,
                              check=False).stdout
        assert "libpython" not in deps, deps
        assert re.search(r"_C\.abi3\.so => \S+", deps) and "not found" not in deps, deps
    # The negative control: without our extension the package's extern kernels have no schema.
    path, args, _ = package
    _write_inputs(tmp_path, args)
    r = _run(programs["without"], path, tmp_path)
    assert r.returncode != 0
    assert "Could not find schema for torch_dml_ops::" in r.stderr, r.stderr[-4000:]


def test_cpp_program_runs_the_package_without_python_and_matches_eager(programs, package, tmp_path):
    path, args, want = package
    _write_inputs(tmp_path, args)
    # Every library the process loads, dlopen'd ones (the package's model) included.
    log = tmp_path / "ld"
    r = _run(programs["with"], path, tmp_path, env={**os.environ, "LD_DEBUG": "files",
                                                     "LD_DEBUG_OUTPUT": str(log)})
    loaded = "".join(p.read_text(errors="replace") for p in tmp_path.glob("ld.*"))
    assert "_C.abi3.so" in loaded and ".wrapper.so" in loaded, loaded[-2000:]
    assert "libpython" not in loaded
    assert r.returncode == 0, f"run_package failed ({r.returncode}):\n{r.stderr[-4000:]}"
    for run in range(RUNS):
        assert_same_bits(_read_outputs(tmp_path, run), want[run])


# An AOTInductor package reads its inputs as if they had the strides of the example inputs it was
# exported with, and does not check them unless AOTI_RUNTIME_CHECK_INPUTS is set: a strided view
# with the right values (ids[:, 0]) gives wrong results, silently (README, Deploy).

def test_cpp_program_makes_strided_inputs_contiguous(programs, package, tmp_path):
    path, args, want = package
    _write_inputs(tmp_path, args, strided=(0, 1))
    r = _run(programs["with"], path, tmp_path)
    assert r.returncode == 0, f"run_package failed ({r.returncode}):\n{r.stderr[-4000:]}"
    for i in (0, 1):
        strides = ", ".join(map(str, _spread_strides(args[i].shape)))
        assert f"input {i}: strides ({strides}) made contiguous" in r.stderr, r.stderr
    for run in range(RUNS):
        assert_same_bits(_read_outputs(tmp_path, run), want[run])


def test_cpp_program_refuses_strided_inputs_passed_as_given(programs, package, tmp_path):
    path, args, _ = package
    _write_inputs(tmp_path, args, strided=(0,))
    r = _run(programs["with"], path, tmp_path, options=["--as-given"])
    assert r.returncode != 0, "a strided input was run as given without an error"
    assert "input_handles[0]: unmatched stride value" in r.stderr, r.stderr[-4000:]
