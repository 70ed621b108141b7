"""``python -m torch_dml_ops``: which backends run here, and the documented examples on each.

Prints the versions and the backends available here, then runs every documented example on
every backend and compares each result bit for bit with the portable path on the CPU.  Without
a GPU the Triton kernels run in triton's CPU interpreter: this entry point sets
TRITON_INTERPRET=1 for itself (before triton is imported) unless the variable is already set.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import sys
from typing import Optional, Sequence, cast

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch_dml_ops as tdo  # noqa: E402
from torch_dml_ops import _backend  # noqa: E402
from torch_dml_ops._library import EXTENSION_ERROR  # noqa: E402
from torch_dml_ops._tables import bits_view  # noqa: E402


def _examples():
    """(title, callable(device) -> tensor, expected or None) for the documented examples."""
    f32, u32 = torch.float32, torch.uint32
    return [
        ("DML_GATHER_ND.md example 1 (1D remapping, DML form, UINT32 indices)",
         lambda d: tdo.gather_nd(torch.tensor([[0., 1.], [2., 3.]], device=d),
                                 torch.tensor([[1], [0]], dtype=u32, device=d),
                                 input_dimension_count=2, indices_dimension_count=2),
         torch.tensor([[2., 3.], [0., 1.]])),
        ("DML_GATHER_ND.md example 2 (2D remapping, DML form, padded {1,2,2,2} / {1,1,2,2})",
         lambda d: tdo.gather_nd(torch.arange(8, dtype=f32, device=d).reshape(1, 2, 2, 2),
                                 torch.tensor([0, 1, 1, 0], dtype=u32, device=d).reshape(1, 1, 2, 2),
                                 input_dimension_count=3, indices_dimension_count=2),
         torch.tensor([[[[2., 3.], [4., 5.]]]])),
        ("natural form, negative int64 indices: x[[-1, 0], [1, -2]] of a 3x4 matrix",
         lambda d: tdo.gather_nd(torch.arange(12, dtype=f32, device=d).reshape(3, 4),
                                 torch.tensor([[-1, 1], [0, -2]], device=d)),
         torch.tensor([9., 2.])),
        ("batch_dims=1 (DML_GATHER_ND1): per-batch row selection, uint16 data",
         lambda d: tdo.gather_nd(torch.arange(24, device=d).reshape(2, 3, 4).to(torch.uint16),
                                 torch.tensor([[[2], [0]], [[1], [1]]], dtype=torch.int32, device=d), 1),
         torch.tensor([[[8, 9, 10, 11], [0, 1, 2, 3]], [[16, 17, 18, 19], [16, 17, 18, 19]]]).to(torch.uint16)),
        ("DML_SCATTER_ND.md example (natural form, as written)",
         lambda d: tdo.scatter_nd(torch.arange(1., 9., device=d), torch.tensor([[4], [3], [1], [7]], device=d),
                                  torch.tensor([9., 10., 11., 12.], device=d)),
         torch.tensor([1., 11., 3., 10., 9., 6., 7., 12.])),
        ("DML_SCATTER_ND.md example in the padded DML form {1,8} / {4,1} / {1,4}, UINT32 indices",
         lambda d: tdo.scatter_nd(torch.arange(1., 9., device=d).reshape(1, 8),
                                  torch.tensor([[4], [3], [1], [7]], dtype=u32, device=d),
                                  torch.tensor([[9., 10., 11., 12.]], device=d),
                                  input_dimension_count=1, indices_dimension_count=2),
         torch.tensor([[1., 11., 3., 10., 9., 6., 7., 12.]])),
        ("scatter_nd reduction='add' with duplicate tuples (every duplicate applied), int32",
         lambda d: tdo.scatter_nd(torch.zeros(4, dtype=torch.int32, device=d), torch.tensor([[1], [-1], [1]], device=d),
                                  torch.tensor([5, 7, 2], dtype=torch.int32, device=d), "add"),
         torch.tensor([0, 7, 0, 7], dtype=torch.int32)),
        ("DML_TOP_K1.md example 3 (tied values, K=3, decreasing): values, UINT32 indices",
         lambda d: tdo.top_k1(torch.tensor([[[[1., 2, 2, 3], [3, 4, 5, 5], [6, 6, 6, 6]]]], device=d), 3, 3,
                              index_dtype=u32),
         (torch.tensor([[[[3., 2, 2], [5, 5, 4], [6, 6, 6]]]]),
          torch.tensor([[[[3, 1, 2], [2, 3, 1], [0, 1, 2]]]], dtype=u32))),
        ("DML_TOP_K1.md example 4 (increasing direction)",
         lambda d: tdo.top_k1(torch.tensor([[[[1., 2, 2, 3], [3, 4, 5, 5], [6, 6, 6, 6]]]], device=d), 3, 3,
                              tdo.AxisDirection.DML_AXIS_DIRECTION_INCREASING, index_dtype=u32),
         (torch.tensor([[[[1., 2, 2], [3, 4, 5], [6, 6, 6]]]]),
          torch.tensor([[[[0, 1, 2], [0, 1, 2], [0, 1, 2]]]], dtype=u32))),
        ("top_k1 on uint16 data (torch.topk refuses it), along axis 0",
         lambda d: tdo.top_k1(torch.tensor([[3, 1], [9, 1], [3, 7]], dtype=torch.uint16, device=d), 2, 0),
         (torch.tensor([[9, 7], [3, 1]], dtype=torch.uint16), torch.tensor([[1, 2], [0, 0]]))),
        ("random 4-D, 3-coordinate tuples, bfloat16 data (1000 slices)",
         lambda d: tdo.gather_nd(
             torch.randn(8, 16, 16, 32, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16).to(d),
             torch.stack([torch.randint(-s, s, (1000,), generator=torch.Generator().manual_seed(s))
                          for s in (8, 16, 16)], 1).to(d)),
         None),
    ]


def _run_on(backend: str, device: str, fn):
    with tdo._backend.override(backend):
        res = fn(device)
    return tuple(r.cpu() for r in res) if isinstance(res, tuple) else res.cpu()


def _shown(res):
    if isinstance(res, tuple):
        return " / ".join(str(_shown(r)) for r in res)
    return res.tolist() if res.numel() <= 16 else f"shape {tuple(res.shape)}"


def _same_bits(a, b) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)
                and all(_same_bits(x, y) for x, y in zip(a, b)))
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point:
        return torch.equal(bits_view(a), bits_view(b))
    return torch.equal(a, b)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m torch_dml_ops", description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 when every example agrees on every backend, 1 otherwise.")
    ap.add_argument("--version", action="version",
                    version=f"torch_dml_ops {tdo.__version__} (torch {torch.__version__})")
    ap.parse_args(argv)
    print(f"torch_dml_ops {tdo.__version__} | torch {torch.__version__} | python {sys.version.split()[0]}")
    try:
        tv = md.version("triton")
    except md.PackageNotFoundError:
        tv = "not installed"
    err = _backend.triton_import_error()
    print(f"triton {tv}: {'kernels import' if not err else 'unavailable (' + err + ')'}"
          f" | CUDA: {torch.cuda.is_available()} | TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '')}")
    print(f"C++ CPU kernels (stable ABI): "
          f"{'loaded' if not EXTENSION_ERROR else 'unavailable (' + EXTENSION_ERROR + ')'}"
          f" | threads: {torch.get_num_threads()}")
    backends = _backend.available_backends()
    print("\nBackends available here:")
    for name, device, why in backends:
        print(f"  {name:7s} on {device:5s}  {why}")

    failures = 0
    print("\nDocumented examples on every backend (each compared bit-for-bit with the portable path on CPU):")
    for title, fn, expected in _examples():
        base = _run_on("torch", "cpu", fn)
        print(f"\n* {title}")
        if expected is not None:
            ok = _same_bits(base, expected)
            failures += not ok
            print(f"  result {_shown(base)}  {'== expected' if ok else '!= expected ' + str(_shown(expected))}")
        for name, device, _ in backends:
            got = _run_on(name, device, fn)
            ok = _same_bits(got, base)
            failures += not ok
            first = got[0] if isinstance(got, tuple) else got
            print(f"  {name:7s}/{device:5s}: shape {tuple(first.shape)} {first.dtype}  "
                  f"{'agrees' if ok else 'DIFFERS'}")

    print("\nConstraint checks (DirectML feature levels):")
    x4 = torch.zeros(1, 1, 4, 4)
    with tdo.feature_level("2_1"):
        try:
            tdo.gather_nd(x4, torch.zeros(1, 1, 2, 2, dtype=torch.int64), input_dimension_count=2,
                          indices_dimension_count=2)
        except tdo.ConstraintError as e:
            print(f"  2_1, int64 indices -> {type(e).__name__}: {e}")
    with tdo.feature_level("3_0"):
        out = tdo.gather_nd(x4, torch.zeros(1, 1, 2, 2, dtype=torch.int64), input_dimension_count=2,
                            indices_dimension_count=2)
        print(f"  3_0, int64 indices -> ok, output sizes {tuple(out.shape)}")
    try:
        tdo.gather_nd(torch.zeros(3, 4), torch.tensor([[0, 1], [3, 0]]))
    except IndexError as e:
        print(f"  out of range -> IndexError: {e}")

    print("\nStable top-k versus torch.topk on a row with ties (x[j] = 1 for j % 7 == 0, else 0), k=5:")
    row = torch.zeros(64)
    row[::7] = 1.0
    ours = tdo.top_k1(row, 5, direction="increasing").indices.tolist()
    theirs = torch.topk(row, 5, largest=False).indices.tolist()
    print(f"  tdo.top_k1 (smallest): {ours}  (the lowest indices, in order: always)")
    print(f"  torch.topk (smallest): {theirs}  (any tied indices, any order: not promised)")

    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    tdo.gather_nd(x, torch.tensor([[1], [1], [-1]])).sum().backward()
    print(f"\nGradient of sum(gather_nd(x, [[1],[1],[-1]])) w.r.t. x (duplicates accumulate): "
          f"{cast(torch.Tensor, x.grad)[:, 0].tolist()}")

    print(f"\n{'All examples agree on every backend.' if not failures else f'{failures} MISMATCHES'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
