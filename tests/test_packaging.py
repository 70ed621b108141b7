"""The built wheel holds exactly one top-level package, with the kernels mapped under it."""
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

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
