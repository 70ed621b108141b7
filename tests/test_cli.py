"""Every ``python -m`` entry point answers ``--help`` with its usage and runs nothing (issue 38:
``python -m torch_dml_ops --help`` ran the whole demo)."""
import subprocess
import sys

import pytest

#: Each entry point and a line its usage must hold (the option that shows it parsed its own).
ENTRY_POINTS = {
    "torch_dml_ops": "--version",
    "torch_dml_ops.bench": "--json",
    "torch_dml_ops.bench.percall": "--bound",
    "torch_dml_ops.bench.fresh": "--processes",
    "torch_dml_ops.bench.gpu": "--json",
    "torch_dml_ops.bench.distributed": "usage:",
    "torch_dml_ops.onnx": "usage:",
}
#: What each prints when it runs its job: none of it may appear under --help.
JOB_OUTPUT = ("Backends available", "Documented examples", "| call |", "no CUDA device",
              "device time per call", "ONNX nodes:", "Traceback", "worst ÷ median (ours")


@pytest.mark.parametrize("module", sorted(ENTRY_POINTS))
def test_entry_point_help_prints_usage_and_runs_nothing(module, tmp_path):
    res = subprocess.run([sys.executable, "-m", module, "--help"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert out.startswith(f"usage: python -m {module}"), out
    assert ENTRY_POINTS[module] in out, out
    ran = [m for m in JOB_OUTPUT if m in out + res.stderr]
    assert not ran, out + res.stderr
    assert not list(tmp_path.iterdir())        # nothing written either


def test_main_job_refuses_an_unknown_argument(tmp_path):
    res = subprocess.run([sys.executable, "-m", "torch_dml_ops", "--no-such-option"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "unrecognized arguments: --no-such-option" in res.stderr, (
        res.stdout + res.stderr)
    assert "Backends available" not in res.stdout


def test_main_job_version(tmp_path):
    import torch
    import torch_dml_ops
    res = subprocess.run([sys.executable, "-m", "torch_dml_ops", "--version"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip() == (f"torch_dml_ops {torch_dml_ops.__version__} "
                                  f"(torch {torch.__version__})"), res.stdout
