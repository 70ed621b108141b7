"""Typing (issue 21): mypy is clean on the package with mypy.ini, and a user's call with a wrong
string option (a ``typing.Literal`` in the public signatures) is reported."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytest.importorskip("mypy", reason="mypy is not installed (pip install -e .[test] brings it)")

import torch  # noqa: E402

# Types are checked against the reference torch (the README's pin): other releases' annotations
# differ, and what their users' type checkers see is theirs to keep stable, not ours.
REFERENCE_TORCH = "2.13."
pytestmark = pytest.mark.skipif(
    not torch.__version__.startswith(REFERENCE_TORCH),
    reason=f"typing is checked against torch {REFERENCE_TORCH}x, the README's pin "
           f"(this is {torch.__version__})")


def _mypy(tmp_path, *args, cwd=ROOT):
    cmd = [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy_cache"),
           "--no-error-summary", *args]
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


def test_package_is_clean(tmp_path):
    if not os.path.exists(os.path.join(ROOT, "mypy.ini")):
        pytest.skip("not a source checkout (no mypy.ini)")
    rc, out = _mypy(tmp_path, "--config-file", os.path.join(ROOT, "mypy.ini"))
    assert rc == 0, out


def test_literal_options_are_checked(tmp_path):
    if not os.path.exists(os.path.join(ROOT, "mypy.ini")):
        pytest.skip("not a source checkout (no mypy.ini)")
    user = tmp_path / "user.py"
    user.write_text(textwrap.dedent("""\
        import torch
        import torch_dml_ops as tdo

        x = torch.zeros(4, 3)
        i = torch.tensor([[1], [2]])
        tdo.gather_nd(x, i)
        tdo.scatter_nd(x, i, torch.ones(2, 3), reduction="add")
        tdo.top_k1(x, 2, direction="increasing")
        with tdo.feature_level("2_1"):
            pass
        tdo.scatter_nd(x, i, torch.ones(2, 3), reduction="sum")
        tdo.top_k1(x, 2, direction="up")
        tdo.feature_level("4_0")
        """))
    # Run from the checkout, which mypy searches first (as it finds an installed package; see
    # README for the editable install that type checkers follow).
    rc, out = _mypy(tmp_path, "--config-file", os.path.join(ROOT, "mypy.ini"), str(user))
    lines = [ln for ln in out.splitlines() if "error:" in ln]
    assert rc == 1, out
    assert [ln.split(":")[1] for ln in lines] == ["11", "12", "13"], out
    assert "'sum'" in lines[0] and "'up'" in lines[1] and "'4_0'" in lines[2], out


def test_public_functions_are_fully_annotated():
    """Every public function names the type of each parameter and of its result (issue 38:
    ``tdo.topk`` came back as ``Any``)."""
    import inspect

    import torch_dml_ops as tdo
    for name in tdo.__all__:
        obj = getattr(tdo, name)
        if not inspect.isfunction(obj):
            continue
        sig = inspect.signature(obj)
        missing = [p for p, v in sig.parameters.items() if v.annotation is inspect.Parameter.empty]
        assert not missing, (name, missing)
        assert sig.return_annotation is not inspect.Signature.empty, name


def test_type_checkers_resolve_the_readmes_install(tmp_path):
    """After the README's install (``pip install -e``: setuptools' strict editable mode, which
    setup.py makes the default), mypy run outside the checkout, as a user's project would,
    finds the package, and every public function's result has a type (issue 38: "Cannot find
    implementation or library stub", ``tdo.topk`` as ``Any``)."""
    user = tmp_path / "user.py"
    user.write_text(textwrap.dedent("""\
        import torch
        import torch_dml_ops as tdo

        x = torch.zeros(4, 3)
        i = torch.tensor([[1], [2]])
        reveal_type(tdo.gather_nd(x, i))
        reveal_type(tdo.scatter_nd(x, i, torch.ones(2, 3), reduction="add"))
        reveal_type(tdo.scatter_nd_(x, i, torch.ones(2, 3)))
        reveal_type(tdo.top_k1(x, 2))
        reveal_type(tdo.topk(x, 2))
        reveal_type(tdo.topk(x, 2).indices)
        reveal_type(tdo.get_feature_level())
        reveal_type(tdo.current_backend())
        reveal_type(tdo.available_backends())
        """))
    rc, out = _mypy(tmp_path, "--no-incremental", str(user), cwd=tmp_path)
    assert "Cannot find implementation" not in out and "import-not-found" not in out, out
    notes = [ln for ln in out.splitlines() if "Revealed type" in ln]
    assert len(notes) == 9, out
    assert not [ln for ln in notes if "Any" in ln], out
    assert "torch.return_types.topk" in notes[4], out
