"""GPU readiness of the Triton launchers, proven on the host (no GPU here): the device guard of
every launch, no host sync or host-to-device copy on unchecked calls, one host read per checked
call, CUDA-graph capture refused with a clear message for checked calls.

The interpreter runs the kernels through numpy (it copies tensors to and from the host itself),
so the host-sync traps below are off while a kernel runs: they watch the launchers and op
kernels, which are what runs on the host on a GPU too.
"""
import contextlib
import types

import pytest
import torch

import torch_dml_ops as tdo
from conftest import TRITON_DEVICE

pytestmark = pytest.mark.triton
DEV = TRITON_DEVICE


def _tk():
    from torch_dml_ops.triton_kernels import _common, gather_nd, scatter_nd, top_k1
    return _common, gather_nd, scatter_nd, top_k1


# ------------------------------------------------------------------------------------------
# 1. the device guard
# ------------------------------------------------------------------------------------------

def test_launch_guard_enters_the_tensors_cuda_device(monkeypatch):
    common = _tk()[0]
    seen = []
    monkeypatch.setattr(torch.cuda, "device",
                        lambda d: seen.append(d) or contextlib.nullcontext())
    fake = types.SimpleNamespace(device=torch.device("cuda", 3))
    with common.launch_guard(fake):
        pass
    assert seen == [3]
    with common.launch_guard(torch.zeros(1)):      # CPU (the interpreter): no CUDA guard
        pass
    assert seen == [3]


@pytest.fixture
def guarded_launches(monkeypatch):
    """Every kernel launch of the three modules, with whether it ran inside ``launch_guard`` and
    on which tensor's device the guard was taken."""
    _, gm, sm, tm = _tk()
    state = {"inside": None, "launches": []}

    @contextlib.contextmanager
    def guard(t):
        state["inside"] = t.device
        try:
            yield
        finally:
            state["inside"] = None

    class Spy:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                state["launches"].append(state["inside"])
                return self.kernel[grid](*args, **kwargs)
            return launch

    for mod, name in ((gm, "_gather_nd_kernel"), (sm, "_scatter_nd_kernel"),
                      (tm, "_top_k1_kernel")):
        monkeypatch.setattr(mod, "launch_guard", guard)
        monkeypatch.setattr(mod, name, Spy(getattr(mod, name)))
    return state["launches"]


def test_every_launch_runs_under_the_device_guard(backend, guarded_launches):
    backend("triton")
    x = torch.randn(5, 6, 3, device=DEV)
    idx = torch.tensor([[0, 1], [4, 5], [2, 2]], device=DEV)
    tdo.gather_nd(x, idx)
    tdo.gather_nd(x, idx, out=torch.empty(3, 3, device=DEV))
    tdo.scatter_nd(x, idx, torch.randn(3, 3, device=DEV))
    tdo.scatter_nd(x, idx, torch.randn(3, 3, device=DEV), reduction="add")
    tdo.top_k1(torch.randn(4, 3000, device=DEV), 5)
    assert len(guarded_launches) >= 7
    assert all(d == x.device for d in guarded_launches), guarded_launches


# ------------------------------------------------------------------------------------------
# 2. host syncs and host-to-device copies
# ------------------------------------------------------------------------------------------

@pytest.fixture
def host_traps(monkeypatch):
    """Records every host read of device data and every host-to-device tensor construction
    made outside a kernel run: ``.item()``, ``.tolist()``, ``bool()``/``int()``/``float()`` of
    a tensor, ``.cpu()``, ``.numpy()``, ``nonzero``, ``torch.tensor``/``as_tensor``,
    ``torch.cuda.synchronize``."""
    from triton.runtime.interpreter import InterpretedFunction
    events = []
    depth = [0]

    def trap(name, real):
        def wrapper(*args, **kwargs):
            if depth[0] == 0:
                events.append(name)
            return real(*args, **kwargs)
        return wrapper

    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu",
                 "numpy", "nonzero"):
        monkeypatch.setattr(torch.Tensor, name, trap(f"Tensor.{name}", getattr(torch.Tensor, name)))
    for name in ("tensor", "as_tensor", "nonzero"):
        monkeypatch.setattr(torch, name, trap(f"torch.{name}", getattr(torch, name)))
    monkeypatch.setattr(torch.cuda, "synchronize", trap("torch.cuda.synchronize",
                                                        torch.cuda.synchronize))
    real_run = InterpretedFunction.run

    def run(self, *args, **kwargs):
        depth[0] += 1
        try:
            return real_run(self, *args, **kwargs)
        finally:
            depth[0] -= 1
    monkeypatch.setattr(InterpretedFunction, "run", run)
    return events


def _inputs():
    x = torch.randn(5, 6, 3, device=DEV)
    # the last tuple is out of range: unchecked calls skip it (zeros / no write), no sync
    idx = torch.tensor([[0, 1], [4, 5], [2, 2], [-1, 0], [9, 0]], device=DEV)
    return x, idx, torch.randn(5, 3, device=DEV)


def _deterministic(fn):
    prev = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        return fn()
    finally:
        torch.use_deterministic_algorithms(prev)


UNCHECKED = {
    "gather_nd": lambda x, i, u: tdo.gather_nd(x, i, check_indices=False),
    "gather_nd_out": lambda x, i, u: tdo.gather_nd(x, i, check_indices=False,
                                                   out=torch.empty(5, 3, device=DEV)),
    "scatter_nd": lambda x, i, u: tdo.scatter_nd(x, i, u, check_indices=False),
    "scatter_nd_deterministic": lambda x, i, u: _deterministic(
        lambda: tdo.scatter_nd(x, i, u, check_indices=False)),
    "scatter_nd_add": lambda x, i, u: tdo.scatter_nd(x, i, u, "add", check_indices=False),
    "scatter_nd_max_int": lambda x, i, u: tdo.scatter_nd(
        x.int(), i, u.int(), "max", check_indices=False),
    "scatter_nd_out": lambda x, i, u: tdo.scatter_nd(x, i, u, check_indices=False,
                                                     out=torch.empty_like(x)),
    "scatter_nd_": lambda x, i, u: tdo.scatter_nd_(x, i, u, check_indices=False),
    "top_k1": lambda x, i, u: tdo.top_k1(torch.randn(4, 3000, device=DEV), 5),
}


@pytest.mark.parametrize("name", list(UNCHECKED))
def test_unchecked_calls_never_sync_or_copy_to_the_device(backend, host_traps, name):
    backend("triton")
    x, idx, upd = _inputs()
    host_traps.clear()
    UNCHECKED[name](x, idx, upd)
    assert host_traps == []


CHECKED = {
    "gather_nd": lambda x, i, u: tdo.gather_nd(x, i),
    "gather_nd_out": lambda x, i, u: tdo.gather_nd(x, i, out=torch.empty(4, 3, device=DEV)),
    "scatter_nd": lambda x, i, u: tdo.scatter_nd(x, i, u),
    "scatter_nd_add": lambda x, i, u: tdo.scatter_nd(x, i, u, "add"),
    "scatter_nd_": lambda x, i, u: tdo.scatter_nd_(x, i, u),
}


@pytest.mark.parametrize("bad", [False, True], ids=["in_range", "out_of_range"])
@pytest.mark.parametrize("name", list(CHECKED))
def test_checked_calls_read_the_device_once(backend, host_traps, name, bad):
    backend("triton")
    x, idx, upd = _inputs()
    idx, upd = (idx[1:], upd[1:]) if bad else (idx[:4], upd[:4])
    host_traps.clear()
    if bad:
        with pytest.raises(IndexError):
            CHECKED[name](x, idx, upd)
        # the flag read, then (the call failing) the offending coordinate for the message
        assert host_traps == ["Tensor.item", "Tensor.item"]
    else:
        CHECKED[name](x, idx, upd)
        assert host_traps == ["Tensor.item"]


# ------------------------------------------------------------------------------------------
# CUDA graphs
# ------------------------------------------------------------------------------------------

def test_refuse_capture_message(monkeypatch):
    common = _tk()[0]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(RuntimeError, match="pass check_indices=False inside CUDA graphs"):
        common.refuse_capture("gather_nd", types.SimpleNamespace(device=torch.device("cuda", 0)))
    common.refuse_capture("gather_nd", torch.zeros(1))    # CPU tensors are never captured


@pytest.mark.parametrize("check", [True, False])
@pytest.mark.parametrize("name", ["gather_nd", "scatter_nd"])
def test_checked_calls_refuse_capture_unchecked_do_not(backend, monkeypatch, name, check):
    backend("triton")
    _, gm, sm, _ = _tk()
    asked = []
    for mod in (gm, sm):
        monkeypatch.setattr(mod, "refuse_capture", lambda op, t: asked.append(op))
    x, idx, upd = _inputs()
    idx, upd = idx[:4], upd[:4]
    if name == "gather_nd":
        tdo.gather_nd(x, idx, check_indices=check)
    else:
        tdo.scatter_nd(x, idx, upd, check_indices=check)
    assert asked == ([name] if check else [])
