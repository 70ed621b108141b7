"""The README's main job runs and every example agrees on every backend available here."""
import os
import subprocess
import sys


def test_main_job_runs_and_backends_agree():
    env = dict(os.environ)
    env.pop("TORCH_DML_OPS_BACKEND", None)
    res = subprocess.run([sys.executable, "-m", "torch_dml_ops"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "All examples agree on every backend." in res.stdout
    assert "DIFFERS" not in res.stdout
