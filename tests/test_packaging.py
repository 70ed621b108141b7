"""The built wheel holds exactly one top-level package, with the kernels mapped under it."""
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


_HAS_CC = any(shutil.which(c) for c in ("cc", "gcc", "clang"))


@pytest.mark.skipif(not _HAS_CC, reason="no C compiler: the native CPU kernels are optional")
def test_wheel_carries_the_native_cpu_kernels(wheel):
    names = wheel.namelist()
    assert any(n.startswith("torch_dml_ops/_cpu_kernels") and n.endswith(".so") for n in names)


@pytest.mark.skipif(not _HAS_CC, reason="no C compiler: the native CPU kernels are optional")
def test_native_cpu_kernels_are_built_and_chosen_on_cpu(monkeypatch):
    """With a compiler present, `pip install -e .` built the extension, and `auto` picks it for
    CPU tensors; the other modes keep their meaning."""
    from torch_dml_ops import _backend, _native
    assert _native.available(), _native.import_error()
    cpu = torch.device("cpu")
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", "auto")
    assert _backend.use_native(cpu) and not _backend.use_triton(cpu)
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", "torch")
    assert not _backend.use_native(cpu)
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", "native")
    assert _backend.use_native(cpu) and not _backend.use_native(torch.device("meta"))
    # never the Triton kernel under native, even where TRITON_INTERPRET=1 would allow it on CPU
    assert not _backend.use_triton(cpu) and not _backend.use_triton(torch.device("cuda"))
    assert ("native", "cpu", "native C kernels") in _backend.available_backends()


def test_without_native_kernels_auto_falls_back_and_native_mode_says_why(monkeypatch):
    from torch_dml_ops import _backend, _native
    monkeypatch.setattr(_native, "_load", lambda: (None, "the native extension is not built (x)"))
    cpu = torch.device("cpu")
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", "auto")
    assert not _backend.use_native(cpu)
    assert all(name != "native" for name, _, _ in _backend.available_backends())
    monkeypatch.setenv("TORCH_DML_OPS_BACKEND", "native")
    with pytest.raises(RuntimeError, match="TORCH_DML_OPS_BACKEND=native but the native "
                                           "extension is not built"):
        _backend.use_native(cpu)


def _readme_test_command() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]
    (cmd,) = [ln for ln in lines if "pytest" in ln]
    return cmd


def test_ci_runs_the_readme_test_command_verbatim_in_a_fresh_venv():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    body = [ln.strip() for ln in ci.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert body[-1] == _readme_test_command()
    # a virtual environment made by the script itself, activated before the command
    venv_at = next(i for i, ln in enumerate(body) if "-m venv" in ln)
    activate_at = next(i for i, ln in enumerate(body) if "/bin/activate" in ln)
    assert venv_at < activate_at < len(body) - 1


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
