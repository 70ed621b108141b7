"""Test configuration: interpreter setup, seeds, markers, hypothesis profile."""
import os

# The Triton kernels run in triton's CPU interpreter when no GPU is present.  The variable must be
# set before triton is imported (by torch_dml_ops.triton_kernels), hence here, first.
try:
    import torch as _torch
    _HAS_CUDA = _torch.cuda.is_available()
except Exception:  # pragma: no cover
    _HAS_CUDA = False
if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.pop("TORCH_DML_OPS_BACKEND", None)   # tests choose the backend (the fixture below)

import pytest  # noqa: E402
import torch  # noqa: E402

try:
    from hypothesis import settings
    settings.register_profile("ci", max_examples=40, derandomize=True, deadline=None,
                              print_blob=True)
    settings.register_profile("dev", max_examples=200, deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # pragma: no cover
    pass

from torch_dml_ops import _backend  # noqa: E402

TRITON_OK = _backend.triton_available() and (_HAS_CUDA or _backend.interpreting())
#: Devices the Triton kernels are tested on: cuda when present, else cpu through the interpreter.
TRITON_DEVICE = "cuda" if _HAS_CUDA else "cpu"


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason=f"Triton kernels unavailable here ({_backend.triton_import_error() or 'no GPU and TRITON_INTERPRET unset'})")
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "triton" in item.keywords and not TRITON_OK:
            item.add_marker(skip)
        if "gpu" in item.keywords and not _HAS_CUDA:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def backend():
    """Switch backends for one test: ``backend("triton")`` (``torch_dml_ops.backend`` entered
    until the test ends; a later call replaces the earlier one)."""
    import torch_dml_ops as tdo
    blocks = []

    def set_backend(name):
        while blocks:
            blocks.pop().__exit__(None, None, None)
        block = tdo.backend(name)
        block.__enter__()
        blocks.append(block)
    yield set_backend
    while blocks:
        blocks.pop().__exit__(None, None, None)


@pytest.fixture
def deterministic():
    prev = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(prev)
