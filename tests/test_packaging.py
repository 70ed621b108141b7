"""The built wheel holds exactly one top-level package, with the kernels mapped under it."""
import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def _built_wheel(tmp_path_factory):
    """The wheel pip builds from the checkout, and the build's log (the compiler's lines)."""
    out = tmp_path_factory.mktemp("wheel")
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                          "--no-build-isolation", "-v", "-w", str(out), str(ROOT)],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, (res.stdout + res.stderr)[-5000:]
    (whl,) = out.glob("torch_dml_ops-*.whl")
    return zipfile.ZipFile(whl), res.stdout + res.stderr


@pytest.fixture(scope="module")
def wheel(_built_wheel):
    return _built_wheel[0]


@pytest.fixture(scope="module")
def wheel_build_log(_built_wheel):
    return _built_wheel[1]


def test_wheel_has_one_top_level_package(wheel):
    names = wheel.namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"torch_dml_ops"}, tops
    (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    assert wheel.read(top_level).decode().split() == ["torch_dml_ops"]


def test_wheel_maps_triton_kernels_under_the_package(wheel):
    names = set(wheel.namelist())
    for f in ("__init__.py", "_common.py", "gather_nd.py"):
        assert f"torch_dml_ops/triton_kernels/{f}" in names
    assert not any(n.startswith("triton_kernels/") for n in names)


def test_installed_package_resolves_kernels_inside_it():
    import torch_dml_ops.triton_kernels as tk
    here = Path(tk.__file__).resolve().parent
    # editable install: the repo folder; regular install: site-packages/torch_dml_ops/triton_kernels
    assert here == ROOT / "triton_kernels" or here.parts[-2:] == ("torch_dml_ops", "triton_kernels")
    assert tk.__name__ == "torch_dml_ops.triton_kernels"


_HAS_CXX = any(shutil.which(c) for c in ("c++", "g++", "clang++"))


@pytest.mark.skipif(not _HAS_CXX, reason="no C++ compiler: the C++ kernels are optional")
def test_wheel_carries_the_cpp_extension(wheel):
    names = wheel.namelist()
    assert any(re.fullmatch(r"torch_dml_ops/_C\.[^/]*\.(so|pyd)", n) for n in names), names


@pytest.mark.skipif(not _HAS_CXX, reason="no C++ compiler: the C++ kernels are optional")
def test_cpp_kernels_are_built_and_chosen_on_cpu(backend, monkeypatch):
    """With a compiler present, `pip install -e .` built the extension; it registered the CPU
    kernel of every op, which ``auto`` and ``native`` run, and ``torch`` overrides with the
    portable kernel.  Never the Triton kernel on CPU tensors under ``native``, even where
    TRITON_INTERPRET=1 would allow it."""
    from conftest import CPP_KERNELS, TRITON_OK
    from torch_dml_ops import _backend, _library, portable
    assert _library.extension_loaded(), _library.EXTENSION_ERROR
    assert ("native", "cpu", "C++ kernels (stable ABI)") in _backend.available_backends()
    assert all(CPP_KERNELS.values()), f"ops without a C++ CPU kernel: {CPP_KERNELS}"
    ran = []
    for op, fn in list(portable.KERNELS.items()):      # read when a backend block is entered
        monkeypatch.setitem(portable.KERNELS, op, lambda *a, _op=op, _fn=fn, **k:
                            ran.append(_op) or _fn(*a, **k))
    launched = []
    if TRITON_OK:
        from torch_dml_ops.triton_kernels import gather_nd as tg, scatter_nd as ts, top_k1 as tt
        for mod, name in ((tg, "gather_nd_triton"), (ts, "scatter_nd_triton"),
                          (ts, "scatter_nd_check_triton"), (tt, "top_k1_triton")):
            real = getattr(mod, name)
            monkeypatch.setattr(mod, name, lambda *a, _r=real, _n=name, **k:
                                launched.append(_n) or _r(*a, **k))

    def calls():
        x = torch.arange(12.).reshape(4, 3)
        i = torch.tensor([[2], [0]])
        assert tdo.gather_nd(x, i).tolist() == [[6., 7., 8.], [0., 1., 2.]]
        assert tdo.scatter_nd(x, i, torch.ones(2, 3))[2].tolist() == [1., 1., 1.]
        assert tdo.top_k1(x, 1).indices.tolist() == [[2]] * 4

    import torch_dml_ops as tdo
    for name, portable_runs in (("auto", False), ("native", False), ("torch", True)):
        backend(name)
        ran.clear()
        calls()
        assert bool(ran) == portable_runs, (name, ran)
        assert not launched, (name, launched)


def test_without_the_extension_the_portable_path_runs_and_native_says_why(tmp_path):
    """A copy of the package without the built extension (no C++ compiler at install): Python
    defines the ops from ``_library.SCHEMAS`` with one warning, every op runs the portable path,
    ``native`` is not offered and refuses with the reason."""
    pkg = tmp_path / "torch_dml_ops"
    skip = shutil.ignore_patterns("_C*.so", "_C*.pyd", "__pycache__")
    shutil.copytree(ROOT / "torch_dml_ops", pkg, ignore=skip)
    shutil.copytree(ROOT / "triton_kernels", pkg / "triton_kernels", ignore=skip)
    script = """
import sys, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch, torch_dml_ops as tdo
from torch_dml_ops import _backend, _library
assert tdo.__file__.startswith(sys.argv[1]), tdo.__file__
assert not _library.extension_loaded() and "not built" in _library.EXTENSION_ERROR
assert any("CPU calls run the portable torch path" in str(w.message) for w in caught)
for name, schema in _library.SCHEMAS.items():
    assert str(_library.op(name)._schema).replace('"', "'") == "torch_dml_ops::" + schema
assert not torch._C._dispatch_has_kernel_for_dispatch_key("torch_dml_ops::gather_nd", "CPU")
x = torch.arange(12.).reshape(4, 3)
i = torch.tensor([[2], [0]])
assert tdo.gather_nd(x, i).tolist() == [[6., 7., 8.], [0., 1., 2.]]
assert tdo.scatter_nd(x, i, torch.ones(2, 3), "add")[2].tolist() == [7., 8., 9.]
assert tdo.top_k1(x, 2, 0).indices.tolist() == [[3, 3, 3], [2, 2, 2]]
assert all(name != "native" for name, _, _ in tdo.available_backends())
try:
    tdo._backend.override("native").__enter__()
except RuntimeError as e:
    assert str(e).startswith("backend 'native': the C++ extension is not built"), str(e)
else:
    raise AssertionError("backend('native') entered without the extension")
with tdo._backend.override("torch"):
    assert tdo.gather_nd(x, i)[1].tolist() == [0., 1., 2.]
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DML_OPS_BACKEND"}
    env["PYTHONPATH"] = str(tmp_path)
    res = subprocess.run([sys.executable, "-c", script, str(pkg)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stdout + res.stderr


def _readme_test_command() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]
    (cmd,) = [ln for ln in lines if "pytest" in ln]
    return cmd


def _ci_body():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    return [ln.strip() for ln in ci.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_ci_runs_the_readme_test_command_verbatim_in_a_fresh_venv():
    body = _ci_body()
    cmd = _readme_test_command()
    assert cmd in body
    at = body.index(cmd)
    assert not any("pytest" in ln for ln in body[:at])      # the first run is the README's
    # a virtual environment made by the script itself, activated before the command
    venv_at = next(i for i, ln in enumerate(body) if "-m venv" in ln)
    activate_at = next(i for i, ln in enumerate(body) if "/bin/activate" in ln)
    assert venv_at < activate_at < at


def _ci_loops():
    """{what each of .ci/run's `for version in ...` loops runs: the versions it names}."""
    body = _ci_body()
    loops = {}
    for i, ln in enumerate(body):
        if ln.startswith("for version in "):
            versions = ln.split(" in ", 1)[1].split(";")[0].split()
            run = "\n".join(body[i + 1:body.index("done", i)])
            loops[run] = versions
    return loops


def test_ci_tests_every_claimed_torch_release():
    """The version policy (issue 38): no claimed release untested.  The whole suite runs on the
    floor, the README's pin and the newest tested release, each in a fresh venv; every other
    release of ``_data.TORCH_TESTED`` at least installs the release wheel and passes the
    version-sensitive part of the suite; the README and docs/packaging.md list what CI runs."""
    from torch_dml_ops import _data
    floor, tested = _data.TORCH_FLOOR, _data.TORCH_TESTED
    # every minor release from the floor to the newest tested, none skipped
    minors = [int(v.split(".")[1]) for v in tested]
    assert tested[0] == floor and minors == list(range(minors[0], minors[-1] + 1)), tested
    pin = re.search(r"pip install torch==([\d.]+) && pip install -e", _readme_test_command())
    full_suite = {pin.group(1)}
    partly = set()
    for run, versions in _ci_loops().items():
        # a fresh venv, torch installed, then the package; the torch checked unchanged after
        assert 'fresh_venv "venv-torch-$version"' in run, run
        assert ('pip install --retries 10 --timeout 120 "torch==$version" && pip install -e '
                '".[test]" && torch_is "$version" && python -m pytest -q') in run, run
        assert "main_job_runs" in run, run
        if re.search(r'torch_is "\$version" && python -m pytest -q$', run, re.M):
            full_suite |= set(versions)
        else:
            assert 'python -m pytest -q $VERSION_SENSITIVE' in run, run
            partly |= set(versions)
    (line,) = [ln for ln in _ci_body() if ln.startswith("VERSION_SENSITIVE=")]
    for path in line.split("=", 1)[1].strip('"').split():
        assert (ROOT / path).is_file(), path
    release = lambda v: ".".join(v.split(".")[:2])           # noqa: E731
    assert {release(v) for v in full_suite} >= {floor, tested[-1]}, full_suite
    assert f"{floor}.0" in full_suite, full_suite                # the floor's first release
    assert {release(v) for v in full_suite | partly} == set(tested), (full_suite, partly)
    # what the README's install table and docs/packaging.md say CI runs
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    packaging = (ROOT / "docs" / "packaging.md").read_text(encoding="utf-8")
    for v in sorted(full_suite | partly):
        assert v in readme.split("## Install", 1)[1].split("\n## ", 1)[0], v
        assert f"| {v}" in packaging, v


def test_ci_runs_the_cpp_tests_under_asan_and_ubsan():
    """Issue 40 item 6: CI builds the extension once more with AddressSanitizer and
    UndefinedBehaviorSanitizer (.ci/sanitize) and runs the tests whose calls reach the C++
    kernels under them, in the README's environment, before the wheel is built (from the
    regular objects: the instrumented ones are built in a folder of their own); a report
    fails CI."""
    body = _ci_body()
    readme = body.index(_readme_test_command())
    run = body.index("bash .ci/sanitize")
    wheel = next(i for i, ln in enumerate(body) if "python -m build --wheel" in ln)
    assert readme < run < wheel
    assert body[run + 1].startswith("record $? "), body[run + 1]
    script = (ROOT / ".ci" / "sanitize").read_text(encoding="utf-8")
    assert 'flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined ' in script
    assert 'CFLAGS="$flags" CXXFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined"' in script
    # the instrumentation is checked in the built code, not only the runtimes' presence
    assert '" __asan_report_"' in script and '" __ubsan_handle_"' in script
    assert '--build-temp "$work/temp"' in script and 'trap restore EXIT' in script
    # every report fails: ASan aborts, UBSan halts, and a report file left behind fails too
    assert "abort_on_error=1" in script and "halt_on_error=1" in script
    assert 'status=1' in script.split('compgen -G "$reports/*"', 1)[1]
    assert "ERROR: AddressSanitizer|runtime error:" in script
    assert "--capture=sys" in script and 'grep -q "runtime error:"' in script
    # the oracles of the three ops, strided views, the validation layer's refusals, each SIMD
    # path of top_k1 (a child process per instruction set, under the same runtime), the backend
    # suite and the kernels called through torch.ops
    named = set(re.findall(r"tests/test_\w+\.py", script))
    assert named >= {"tests/test_gather_nd.py", "tests/test_scatter_nd.py",
                     "tests/test_top_k1.py", "tests/test_top_k1_simd.py",
                     "tests/test_strided_views.py", "tests/test_validation.py",
                     "tests/test_backends.py", "tests/test_entry_points.py"}, named
    for path in named:
        assert (ROOT / path).is_file(), path


def test_cpp_sources_are_files_of_at_most_1000_lines():
    """Issue 40 item 4: no C++ file over 1,000 lines; top_k1's parts (keys, the native pass,
    the networks, the per-row plan) are headers of their own, each included once, by the next
    part or by top_k1.cpp, since they share its anonymous namespace (one translation unit)."""
    csrc = ROOT / "torch_dml_ops" / "csrc"
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines())
             for p in sorted(csrc.glob("*.*")) if p.suffix in (".cpp", ".h")}
    assert all(n <= 1000 for n in sizes.values()), sizes
    parts = sorted(name for name in sizes if name.startswith("top_k1_"))
    assert parts, sizes
    includes = {name: re.findall(r'^#include "(top_k1_\w+\.h)"', (csrc / name).read_text(
        encoding="utf-8"), re.M) for name in sizes}
    for part in parts:
        who = [name for name, inc in includes.items() if part in inc]
        assert len(who) == 1 and who[0].startswith("top_k1"), (part, who)


def test_installing_never_changes_torch():
    """torch is no requirement of the package (installing it never downgrades, upgrades or
    swaps the user's torch: issue 38, pip replaced 2.15.0 with 2.14.1); the ``torch`` extra
    asks for the floor with no upper bound (the wheel's metadata: below)."""
    (call,) = [n for n in ast.walk(ast.parse((ROOT / "setup.py").read_text(encoding="utf-8")))
               if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "setup"]
    kw = {k.arg: k.value for k in call.keywords}
    assert ast.literal_eval(kw["install_requires"]) == []


def test_built_wheel_metadata_tells_the_truth(wheel):
    """Requires-Python and the abi3 tag are the floor torch's oldest Python (issue 38: "3.9+"
    could not be installed, no torch 2.10 exists for it); torch only in the ``torch`` extra."""
    (meta,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    lines = wheel.read(meta).decode().splitlines()
    from torch_dml_ops import _data
    assert f"Requires-Python: >={_data.TORCH_FLOOR_PYTHON}" in lines
    torch_reqs = [ln for ln in lines if ln.startswith("Requires-Dist: torch")]
    assert torch_reqs == [f'Requires-Dist: torch>={_data.TORCH_FLOOR}; extra == "torch"'], lines
    py = _data.TORCH_FLOOR_PYTHON.replace(".", "")
    assert os.path.basename(wheel.filename).split("-")[2:4] == [f"cp{py}", "abi3"], wheel.filename


def test_the_build_compiles_without_a_warning(wheel_build_log):
    """The C++ sources compile without a compiler warning (issue 38: gcc 12 printed 213, from
    the unmasked AVX-512 intrinsics' undefined pass-through), nothing silenced: the build's
    flags are setuptools' own (-Wall among them) and nothing in the sources turns a warning
    off."""
    # the compiler's warnings ("file:line:col: warning: ...", "cc1plus: warning: ..."), not
    # setuptools' own notes ("warning: build_py: byte-compiling is disabled")
    compiler = re.compile(r"(^\S+:\d+:(\d+:)?|\b(cc1plus|g\+\+|c\+\+|gcc|clang\+\+)(-\d+)?:) "
                          r"warning:")
    warnings_ = [ln for ln in wheel_build_log.splitlines() if compiler.search(ln)]
    assert "-Wall" in wheel_build_log, wheel_build_log[-3000:]
    assert not warnings_, "\n".join(warnings_[:20])
    for path in sorted((ROOT / "torch_dml_ops" / "csrc").glob("*.*")):
        text = path.read_text(encoding="utf-8")
        assert "diagnostic ignored" not in text and "-Wno-" not in text, path
    assert "-Wno-" not in (ROOT / "setup.py").read_text(encoding="utf-8")


def test_wheel_ships_py_typed(wheel):
    assert "torch_dml_ops/py.typed" in wheel.namelist()


def test_torch_ops_overloads_have_docstrings():
    import torch_dml_ops  # noqa: F401  (registers the ops)
    ns = torch.ops.torch_dml_ops
    for name in ("gather_nd", "gather_nd_out", "gather_nd_backward", "scatter_nd",
                 "scatter_nd_out", "scatter_nd_", "top_k1"):
        packet = getattr(ns, name)
        assert packet.__doc__ and "Schema" in packet.__doc__, name
        for overload in packet.overloads():
            doc = getattr(packet, overload).__doc__
            assert doc and f"{name}(" in doc, (name, overload)


@pytest.mark.skipif(not _HAS_CXX, reason="no C++ compiler: the C++ kernels are optional")
def test_a_build_that_does_not_compile_fails_saying_why(tmp_path):
    """The compiler's error fails the build, with the way out (TORCH_DML_OPS_SKIP_EXTENSION=1);
    with it, the build succeeds without the extension and the reason reaches the build's
    warning, the record beside the package and the warning at import."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "setup.py", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(ROOT / "torch_dml_ops", src / "torch_dml_ops",
                    ignore=shutil.ignore_patterns("__pycache__", "_C.build-error.txt"))
    shutil.copytree(ROOT / "triton_kernels", src / "triton_kernels",
                    ignore=shutil.ignore_patterns("__pycache__"))
    first = sorted((src / "torch_dml_ops" / "csrc").glob("*.cpp"))[0]
    first.write_text("#error deliberately broken\n" + first.read_text())
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DML_OPS_SKIP_EXTENSION"}
    build = [sys.executable, "setup.py", "-q", "build_ext", "--inplace"]
    res = subprocess.run(build, cwd=src, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode != 0
    assert "error: #error deliberately broken" in res.stderr
    assert "the C++ extension was not built" in res.stderr
    assert "TORCH_DML_OPS_SKIP_EXTENSION=1" in res.stderr
    assert not list((src / "torch_dml_ops").glob("_C*.so"))
    env["TORCH_DML_OPS_SKIP_EXTENSION"] = "1"
    res = subprocess.run(build, cwd=src, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "error: #error deliberately broken" in res.stderr.split("WARNING: torch_dml_ops:")[1]
    assert not list((src / "torch_dml_ops").glob("_C*.so"))
    record = (src / "torch_dml_ops" / "_C.build-error.txt").read_text()
    assert f"do not compile against torch {torch.__version__}" in record, record
    script = ("import warnings\nwith warnings.catch_warnings(record=True) as w:\n"
              "    warnings.simplefilter('always')\n    import torch_dml_ops\n"
              "print('\\n'.join(str(x.message) for x in w))")
    res = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={**env, "PYTHONPATH": str(src)})
    assert "#error deliberately broken" in res.stdout, res.stdout + res.stderr


def test_pyproject_builds_with_setuptools_and_never_asks_for_torch():
    """PEP 517 through setuptools; torch is not a build requirement (an isolated build would
    install a second, several-GB torch), nor anything that needs it."""
    tomllib = pytest.importorskip("tomllib")
    with open(ROOT / "pyproject.toml", "rb") as f:
        system = tomllib.load(f)["build-system"]
    assert system["build-backend"] == "setuptools.build_meta"
    assert not [r for r in system["requires"] if re.match(r"(torch|triton)\b", r)]


def test_isolated_build_that_cannot_see_torch_fails_saying_what_to_do(tmp_path):
    """``python -m build --wheel`` (an isolated environment without torch) cannot compile the
    kernels: it fails, naming the builds that work, rather than making a wheel without them."""
    pytest.importorskip("build")
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DML_OPS_SKIP_EXTENSION"}
    res = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path),
                          str(ROOT)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "torch is not installed where this build can see it" in out
    assert "--no-isolation" in out and "TORCH_DML_OPS_SKIP_EXTENSION=1" in out
    assert not list(tmp_path.glob("*.whl"))


# Private torch APIs: named only in torch_dml_ops/_compat.py, where each is probed and says what
# it buys.  _inductor_fixes.py is itself a patch of an Inductor bug, inert where torch has the fix
# or lacks the pieces (its docstring).
_PRIVATE = re.compile(r"\btorch(\.\w+)*\._(?!_version__)\w+|\b_C\.\w+|\b_C\b|\._handle\b"
                      r"|\b_pytree\b|\._destroy\b|\b_fwad\b|\bfrom torch\._\w+"
                      r"|\bfrom torch(\.\w+)* import _\w+")
_PRIVATE_ALLOWED = {"_compat.py", "_inductor_fixes.py"}


def _code_lines(path: Path):
    """(line, code) of ``path`` without comments and string literals."""
    import io
    import tokenize
    lines: dict = {}
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type not in (tokenize.COMMENT, tokenize.STRING):
            lines.setdefault(tok.start[0], []).append(tok.string)
    return [(n, re.sub(r"\s*\.\s*", ".", " ".join(t))) for n, t in sorted(lines.items())]


def test_private_torch_apis_are_named_only_in_the_compat_module():
    found = []
    for path in sorted((ROOT / "torch_dml_ops").rglob("*.py")) + sorted(
            (ROOT / "triton_kernels").rglob("*.py")):
        if path.name in _PRIVATE_ALLOWED:
            continue
        for n, code in _code_lines(path):
            code = code.replace("torch.ops.torch_dml_ops._", "torch.ops.torch_dml_ops.")
            if _PRIVATE.search(code):
                found.append(f"{path.relative_to(ROOT)}:{n}: {code}")
    assert not found, "private torch APIs outside _compat.py:\n" + "\n".join(found)


def test_private_api_probes_fall_back(monkeypatch):
    """Without the eager shortcut's private APIs the public functions take the dispatcher, and
    give the same results; without Library._destroy a registration says it cannot be removed."""
    import torch_dml_ops as tdo
    from torch_dml_ops import _compat
    x = torch.randn(6, 5)
    i = torch.tensor([[4], [-1], [0]])
    want = tdo.gather_nd(x, i)
    monkeypatch.setattr(_compat, "EAGER_SHORTCUT", False)
    assert not _compat.nothing_intercepts() and not _compat.eager_and_unobserved()
    assert torch.equal(tdo.gather_nd(x, i), want)
    assert torch.equal(tdo.scatter_nd(x, i, torch.ones(3, 5)), x.index_copy(
        0, torch.tensor([4, 5, 0]), torch.ones(3, 5)))
    assert _compat._lookup("_C._no_such_api") is None
    assert _compat._lookup("_functorch.no_such_module.x") is None
    with pytest.raises(ImportError, match="torch._C._no_such_api .*lacks"):
        _compat._required("_C._no_such_api", "testing")

    class NoDestroy:
        pass
    with pytest.raises(RuntimeError, match="cannot remove"):
        _compat.drop_library(NoDestroy())


# ---------------------------------------------------------------------------------------------
# The package's import graph (issue 21): no cycle among its modules
# ---------------------------------------------------------------------------------------------

#: The imports of the package's own modules made inside a function, each for a reason: the
#: only ones the graph below leaves out.  Every other import of a package module, at module
#: level or in a function, is an edge of the graph (an import in a function that merely dodges
#: a cycle still makes one); one under ``if TYPE_CHECKING:`` never runs and is not.
LAZY_IMPORTS = {
    ("torch_dml_ops._subclass", "from .distributed import _fronts"):
        "the DTensor hook: distributed imports torch.distributed.tensor (0.6 s), so it is "
        "loaded when a tensor subclass first reaches an op in a process that imported DTensor",
    ("torch_dml_ops._backend", "from . import triton_kernels"):
        "triton's import costs seconds: the Triton kernels load on the first CUDA call",
    ("torch_dml_ops._backend", "from .triton_kernels import KERNELS"):
        "triton's import costs seconds: the Triton kernels load on the first CUDA call",
    ("torch_dml_ops.bench.gpu", "from torch_dml_ops.triton_kernels import _common"):
        "triton, once the GPU benchmark has found a CUDA device",
}


def _package_modules() -> dict:
    """{module name: (path, is_package)}: ``torch_dml_ops/``, and ``triton_kernels/``, which
    setup.py installs as ``torch_dml_ops.triton_kernels``."""
    found = {}
    for folder, prefix in ((ROOT / "torch_dml_ops", ["torch_dml_ops"]),
                           (ROOT / "triton_kernels", ["torch_dml_ops", "triton_kernels"])):
        for path in sorted(folder.rglob("*.py")):
            parts = prefix + list(path.relative_to(folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imports(tree):
    """(node, lazy) for every import statement of a module: ``lazy`` when it runs in a
    function; those under ``if TYPE_CHECKING:`` are left out."""
    import ast
    found = []

    def visit(nodes, lazy):
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append((node, lazy))
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse, lazy)
            else:
                inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                  ast.Lambda))
                visit(ast.iter_child_nodes(node), inner)
    visit(tree.body, False)
    return found


def _import_graph():
    """``(edges, lazy)``: ``edges`` {module: the package modules its imports run}, the
    ``LAZY_IMPORTS`` aside; ``lazy`` the (module, statement) of every import of a package module
    made in a function.  ``from .a import b`` imports ``a.b`` where that is a module, else
    ``a``; importing ``a.b`` runs the package ``a`` first, unless ``a`` is one of the
    importer's own packages (already being imported: ``torch_dml_ops`` for all of them)."""
    import ast
    modules = _package_modules()
    edges, lazy = {}, set()
    for name, (path, is_package) in modules.items():
        package = name.split(".") if is_package else name.split(".")[:-1]
        edges[name] = set()
        for node, in_function in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name.split(".") for a in node.names]
            else:
                base = package[:len(package) - node.level + 1] if node.level else []
                base = base + (node.module.split(".") if node.module else [])
                targets = [base + [a.name] for a in node.names] + [base]
            ran = set()
            for parts in targets:
                if ".".join(parts) not in modules:
                    continue
                for n in range(1, len(parts) + 1):      # the packages above it, then itself
                    mod = ".".join(parts[:n])
                    if mod in modules and not (name + ".").startswith(mod + "."):
                        ran.add(mod)
            ran.discard(name)
            if not ran:
                continue
            statement = (name, ast.unparse(node))
            if in_function:
                lazy.add(statement)
            if statement not in LAZY_IMPORTS:
                edges[name] |= ran
    return edges, lazy


def _cycles(edges) -> list:
    """The strongly connected groups of modules (Tarjan), each with the shortest cycle through
    each of its modules: ``[(group, [[a, b, ..., a], ...])]``."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    groups = []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    def shortest_cycle(start, group):
        paths, seen = [[start]], {start}
        while paths:        # breadth first, within the group, back to start
            path = paths.pop(0)
            following = sorted(edges[path[-1]] & group)
            if start in following:
                return path + [start]
            for w in following:
                if w not in seen:
                    seen.add(w)
                    paths.append(path + [w])
        raise AssertionError("a strongly connected group has a cycle through each module")

    for v in sorted(edges):
        if v not in index:
            connect(v)
    found = []
    for group in groups:
        cycles: list = []
        for start in sorted(group):
            cycle = shortest_cycle(start, group)
            i = cycle.index(min(cycle[:-1]))       # one rotation of each
            cycle = cycle[i:-1] + cycle[:i] + [cycle[i]]
            if cycle not in cycles:
                cycles.append(cycle)
        found.append((sorted(group), cycles))
    return found


def test_the_package_has_no_import_cycle():
    edges, _ = _import_graph()
    assert "torch_dml_ops.distributed" in edges and edges["torch_dml_ops.gather_nd"]
    groups = _cycles(edges)
    assert not groups, "import cycles among the package's modules:\n" + "\n".join(
        f"modules {', '.join(group)}; cycles:\n" + "\n".join(
            "  " + " -> ".join(c) for c in cycles) for group, cycles in groups)


def test_the_only_lazy_imports_of_package_modules_are_the_listed_ones():
    """An import of a package module inside a function is either one of ``LAZY_IMPORTS`` (with
    its reason) or belongs at module level; and every listed one still exists."""
    _, lazy = _import_graph()
    assert lazy == set(LAZY_IMPORTS), (
        f"unlisted: {sorted(lazy - set(LAZY_IMPORTS))}; gone: {sorted(set(LAZY_IMPORTS) - lazy)}")


#: The modules that may name DTensor or torch.distributed in code: ``distributed/`` itself, the
#: hook, the package root (which imports ``distributed`` where DTensor is already in use),
#: ``_compat`` (every private torch API, DTensor's included) and the DTensor benchmark.
_DTENSOR_ALLOWED = ("torch_dml_ops", "torch_dml_ops._subclass", "torch_dml_ops._compat",
                    "torch_dml_ops.bench.distributed")


def test_dtensor_handling_lives_in_distributed():
    """No other module names DTensor, its placements or torch_dml_ops.distributed in code
    (docstrings and comments aside): the op fronts, _library, _autograd and _backend reach it
    through ``_subclass`` only."""
    found = []
    for name, (path, _) in _package_modules().items():
        if name.startswith("torch_dml_ops.distributed") or name in _DTENSOR_ALLOWED:
            continue
        for n, code in _code_lines(path):
            if re.search(r"\bDTensor\b|\bdistributed\b|\bplacements\b|\bShard\b", code):
                found.append(f"{path.relative_to(ROOT)}:{n}: {code.strip()}")
    assert not found, "DTensor handling outside torch_dml_ops/distributed:\n" + "\n".join(found)


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without torch.distributed")
def test_dtensor_support_loads_only_where_dtensor_is_in_use():
    """The hook at run time: ``import torch_dml_ops`` and calls on plain tensors or other
    subclasses load neither torch.distributed.tensor nor torch_dml_ops.distributed; once DTensor
    is imported, the first call with a subclass loads it (registering the sharding rules), and
    so does ``import torch_dml_ops`` after DTensor."""
    late = """
import sys, torch
import torch_dml_ops as tdo
x, i = torch.randn(4, 5), torch.tensor([[1], [3]])
p = torch.nn.Parameter(x)
tdo.gather_nd(p, i); tdo.scatter_nd(x, i, torch.ones(2, 5)); tdo.top_k1(p, 2)
assert "torch.distributed.tensor" not in sys.modules, "DTensor imported"
assert "torch_dml_ops.distributed" not in sys.modules, "distributed imported"
import torch.distributed.tensor
tdo.top_k1(x, 2)
assert "torch_dml_ops.distributed" not in sys.modules, "distributed imported for a plain tensor"
tdo.top_k1(p, 2)
assert "torch_dml_ops.distributed" in sys.modules, "distributed not imported"
print("ok")
"""
    early = """
import sys, torch.distributed.tensor, torch_dml_ops
assert "torch_dml_ops.distributed" in sys.modules
print("ok")
"""
    for script in (late, early):
        res = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr


# ---------------------------------------------------------------------------------------------
# One home per rule: the tables and messages in _data.py, used by both languages
# ---------------------------------------------------------------------------------------------

def _template_fields(text):
    import string
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def _python_message_calls():
    """(file, line, key, keyword names) of every ``message("key", ...)`` in the package."""
    import ast
    calls = []
    for path in sorted((ROOT / "torch_dml_ops").rglob("*.py")) + sorted(
            (ROOT / "triton_kernels").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "message"):
                assert isinstance(node.args[0], ast.Constant), (path, node.lineno)
                calls.append((path.name, node.lineno, node.args[0].value,
                              {k.arg for k in node.keywords}))
    return calls


def _cpp_fill_calls():
    """(file, key, field names) of every ``fill(msg::key, {{"field", ...}, ...})`` in csrc/."""
    calls = []
    for path in sorted((ROOT / "torch_dml_ops" / "csrc").glob("*.*")):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"fill\(msg::(\w+),", text):
            # the initializer list: up to the bracket that closes it
            i, depth = text.index("{", m.end()), 0
            for j in range(i, len(text)):
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                if depth == 0:
                    break
            calls.append((path.name, m.group(1), set(re.findall(r'\{"(\w+)",', text[i:j + 1]))))
    return calls


def test_every_message_is_written_once_and_filled_alike_in_python_and_cpp():
    """Each rule's message lives in _data.MESSAGES only: every key is used by the Python layer
    and, except a feature level's limits (Python's alone), by the C++ kernels (generated into
    tdo_data.inc), and every use fills exactly the template's fields (a C++ fill() missing one
    would throw at run time instead of raising the rule's error)."""
    from torch_dml_ops._data import LEVEL_MESSAGES, MESSAGES
    py, cpp = _python_message_calls(), _cpp_fill_calls()
    assert py and cpp
    for where, line, key, names in py:
        assert key in MESSAGES, (where, line, key)
        assert names == _template_fields(MESSAGES[key]), (where, line, key, names)
    for where, key, names in cpp:
        assert key in MESSAGES, (where, key)
        assert names == _template_fields(MESSAGES[key]), (where, key, names)
    # (messages without fields are used as plain strings on both sides)
    plain = {k for k, v in MESSAGES.items() if not _template_fields(v)}
    py_keys = {key for _, _, key, _ in py} | plain
    cpp_keys = {key for _, key, _ in cpp} | (plain - set(LEVEL_MESSAGES))
    assert set(MESSAGES) - py_keys == set(), "messages the Python layer never raises"
    assert set(MESSAGES) - cpp_keys == set(LEVEL_MESSAGES), "messages the C++ kernels never raise"
    csrc = "".join(p.read_text(encoding="utf-8")
                   for p in (ROOT / "torch_dml_ops" / "csrc").glob("*.*"))
    for key in MESSAGES:
        assert (f"msg::{key}" in csrc) is (key not in LEVEL_MESSAGES), key


def test_the_typing_literals_agree_with_the_tables():
    import typing

    from torch_dml_ops import _data, _levels, _types
    assert typing.get_args(_types.Reduction) == _data.REDUCTIONS
    assert set(_data.DIRECTIONS) <= set(typing.get_args(_types.Direction))
    names = set(typing.get_args(_types.FeatureLevelName))
    assert names - {None} == set(_levels._ALIASES)


def test_the_removed_backend_switch_says_what_replaced_it():
    """``torch_dml_ops.backend(...)`` (0.1, thread-unsafe) is gone: an AttributeError that names
    the replacements; other unknown names and lazily imported submodules behave as usual."""
    import torch_dml_ops as tdo
    with pytest.raises(AttributeError, match="TORCH_DML_OPS_BACKEND"):
        tdo.backend("torch")
    assert not hasattr(tdo, "no_such_name")
    from torch_dml_ops import portable   # noqa: F401  (a submodule import still resolves)


# ---- the torch version policy at import (issue 38) ------------------------------------------
@pytest.mark.parametrize("version,outcome", [
    ("2.9.1", "refused"), ("2.9.1+cu128", "refused"), ("1.13.1", "refused"),
    ("2.10.0", "quiet"), ("2.13.0+cpu", "quiet"), ("2.15.0+cu132", "quiet"), ("2.15.3", "quiet"),
    ("2.16.0", "warned"), ("2.16.0.dev20261201+cu132", "warned"), ("3.0.0", "warned"),
])
def test_torch_version_policy(version, outcome, recwarn):
    """Below the floor an ImportError that says what to install; every tested release (its
    patch releases and local builds included) imports quietly; a newer one with one
    UntestedTorchWarning that names both versions."""
    from torch_dml_ops import _compat, _data
    if outcome == "refused":
        with pytest.raises(ImportError, match=rf"needs torch >= {_data.TORCH_FLOOR} .*this is "
                                              rf"torch {re.escape(version)}\..*pip install"):
            _compat.check_torch_version(version)
        return
    _compat.check_torch_version(version)
    caught = [w for w in recwarn if issubclass(w.category, _compat.UntestedTorchWarning)]
    if outcome == "quiet":
        assert not caught
    else:
        (w,) = caught
        assert f"tested on torch {_data.TORCH_FLOOR} to {_data.TORCH_TESTED[-1]}" in str(w.message)
        assert f"torch {version} is newer" in str(w.message)
        assert "\n" not in str(w.message)


def test_import_checks_the_installed_torch(tmp_path):
    """``import torch_dml_ops`` runs the policy on the installed torch before anything else: on
    a torch reporting 2.9 it fails saying so (the C++ extension never loaded), on a newer one
    it warns once, and on this one (a tested release) it says nothing."""
    script = """
import sys, warnings
import torch
if sys.argv[1] != "installed":
    torch.__version__ = sys.argv[1]
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    try:
        import torch_dml_ops
    except ImportError as e:
        print("ImportError:", e)
        assert "torch_dml_ops" not in str(torch.ops.loaded_libraries), torch.ops.loaded_libraries
        raise SystemExit(0)
print("warnings:", [w.category.__name__ for w in caught])
"""
    def run(version):
        res = subprocess.run([sys.executable, "-c", script, version], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        return res.stdout
    assert "ImportError: torch_dml_ops needs torch >= 2.10" in run("2.9.1")
    assert "'UntestedTorchWarning'" in run("2.99.0")
    from torch_dml_ops import _compat, _data
    if _compat.release(torch.__version__) <= _compat.release(_data.TORCH_TESTED[-1]):
        assert "UntestedTorchWarning" not in run("installed")


#: A measured figure: a time, a bandwidth, or a ratio of times ("1.9x faster", "0.89x the time",
#: "7% slower").
_MEASURED = re.compile(r"\b\d[\d.,]*(-\d[\d.,]*)? ?(us|µs|ms|ns|GB/s|MB/s)\b"
                       r"|\b\d+(\.\d+)? (s|min)\b"
                       r"|\b\d[\d.]*x (faster|slower|the time)\b|\b\d+(-\d+)?% (faster|slower)\b")


def test_timings_live_in_the_benchmark_docs_not_in_code():
    """Measured figures go stale in code comments (issue 40): the package and the kernels name
    an entry of docs/benchmarks.md's "Measured choices" instead (the benchmark's own code, which
    measures, aside), and every entry a comment names exists there."""
    sources = [p for p in sorted((ROOT / "torch_dml_ops").rglob("*"))
               if p.suffix in (".py", ".cpp", ".h") and "bench" not in p.relative_to(ROOT).parts]
    sources += sorted((ROOT / "triton_kernels").glob("*.py"))
    found, named = [], set()
    for path in sources:
        text = path.read_text(encoding="utf-8")
        for no, line in enumerate(text.splitlines(), 1):
            if _MEASURED.search(line):
                found.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
            named |= set(re.findall(r"\bM(\d+)\b", line))
        # a figure broken across the lines of a comment ("1.9x" / "// faster")
        joined = re.sub(r"\n[ \t]*(//|#)[ \t]*", " ", text)
        lines = text.splitlines()
        for m in _MEASURED.finditer(joined):
            if not any(m.group() in line for line in lines):
                found.append(f"{path.relative_to(ROOT)}: {m.group()!r} across comment lines")
    assert not found, "\n".join(found)
    docs = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    table = docs.split("## Measured choices", 1)[1].split("\n## ", 1)[0]
    entries = set(re.findall(r"^\| M(\d+) \|", table, re.M))
    assert named and named <= entries, sorted(named - entries)
