"""The built wheel holds exactly one top-level package, with the kernels mapped under it."""
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
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(ROOT)], check=True)
    (whl,) = out.glob("torch_dml_ops-*.whl")
    return zipfile.ZipFile(whl)


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


def test_ci_runs_the_readme_test_command_verbatim_in_a_fresh_venv():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    body = [ln.strip() for ln in ci.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    cmd = _readme_test_command()
    assert cmd in body
    at = body.index(cmd)
    assert not any("pytest" in ln for ln in body[:at])      # the first run is the README's
    # a virtual environment made by the script itself, activated before the command
    venv_at = next(i for i, ln in enumerate(body) if "-m venv" in ln)
    activate_at = next(i for i, ln in enumerate(body) if "/bin/activate" in ln)
    assert venv_at < activate_at < at
    # then the lowest and the newest torch that setup.py claims, the same way
    claim = re.search(r'TORCH_REQUIREMENT = "torch>=(\d+)\.(\d+),<(\d+)\.(\d+)"',
                      (ROOT / "setup.py").read_text(encoding="utf-8"))
    lo, hi = claim.group(1, 2), (claim.group(3), str(int(claim.group(4)) - 1))
    (loop,) = [ln for ln in body[at:] if ln.startswith("for version in ")]
    versions = loop.split(" in ", 1)[1].split(";")[0].split()
    assert versions[0] == ".".join(lo) + ".0", versions
    assert versions[-1].startswith(".".join(hi) + "."), versions
    assert ('pip install --retries 10 --timeout 120 "torch==$version" && pip install -e ".[test]" '
            '&& python -m pytest -q') in body


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
