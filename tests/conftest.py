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

from torch_dml_ops import _backend, _library  # noqa: E402

TRITON_OK = _backend.triton_available() and (_HAS_CUDA or _backend.interpreting())
#: Devices the Triton kernels are tested on: cuda when present, else cpu through the interpreter.
TRITON_DEVICE = "cuda" if _HAS_CUDA else "cpu"

#: Whether the C++ extension (the op schemas, and the CPU kernels once they are built) is loaded.
NATIVE_OK = _library.extension_loaded()
NATIVE_SKIP = f"the C++ extension is not built ({_library.EXTENSION_ERROR})"
#: Whether the extension registered its own CPU kernel for each op.  Read here, before any test
#: enters a ``torch_dml_ops._backend.override`` block (which registers CPU kernels of its own); until an
#: op's C++ kernel is built, the CPU key falls back to the portable path, ``native`` included.
CPP_KERNELS = {op: torch._C._dispatch_has_kernel_for_dispatch_key(
    f"{_library.NAMESPACE}::{op}", "CPU") for op in _library.OPS}

#: Every backend, as parameters of the ``any_backend`` fixture: ``native`` skipped where the
#: extension is not built, ``triton`` marked (skipped where the Triton kernels cannot run).
BACKENDS = ("torch", "native", "triton")


def backend_param(name, *values, id=None):
    """``pytest.param(name, *values)`` with the marks backend ``name`` needs."""
    marks = ()
    if name == "native":
        marks = (pytest.mark.skipif(not NATIVE_OK, reason=NATIVE_SKIP),)
    elif name == "triton":
        marks = (pytest.mark.triton,)
    return pytest.param(name, *values, marks=marks, id=id or name)


def require_cpp_kernel(*ops):
    """Fail (not skip) unless the C++ CPU kernels of ``ops`` are registered: a test that needs
    them passes once they land."""
    missing = [op for op in ops if not CPP_KERNELS.get(op)]
    if missing:
        pytest.fail(f"the C++ CPU kernel of {', '.join(missing)} is not registered (csrc/ not "
                    f"built with it yet); the CPU key runs the portable path")


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason=f"Triton kernels unavailable here ({_backend.triton_import_error() or 'no GPU and TRITON_INTERPRET unset'})")
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("triton") and not TRITON_OK:
            item.add_marker(skip)
        if item.get_closest_marker("gpu") and not _HAS_CUDA:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def backend():
    """Switch backends for one test: ``backend("triton")`` (``torch_dml_ops._backend.override`` entered
    until the test ends; a later call replaces the earlier one)."""
    import torch_dml_ops as tdo
    blocks = []

    def set_backend(name):
        while blocks:
            blocks.pop().__exit__(None, None, None)
        block = tdo._backend.override(name)
        block.__enter__()
        blocks.append(block)
    yield set_backend
    while blocks:
        blocks.pop().__exit__(None, None, None)


@pytest.fixture(params=[backend_param(name) for name in BACKENDS])
def any_backend(request, backend):
    """Every backend in turn (``torch_dml_ops._backend.override`` entered for the test): ``torch`` (the
    portable path), ``native`` (the C++ kernels on the CPU), ``triton`` (CUDA, or the CPU
    through the interpreter).  Returns the name; ``dev`` is the device to test it on."""
    backend(request.param)
    return request.param


@pytest.fixture
def dev(any_backend):
    """The device the backend under test runs on (Triton: cuda where present)."""
    return TRITON_DEVICE if any_backend == "triton" else "cpu"


@pytest.fixture
def num_threads():
    """``num_threads(n)``: torch's intra-op thread count (which the C++ kernels use) for one
    test, restored after."""
    saved = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(saved)


@pytest.fixture
def deterministic():
    prev = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(prev)
