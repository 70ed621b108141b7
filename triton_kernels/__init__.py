"""Triton kernels and their launchers, installed as ``torch_dml_ops.triton_kernels``.

This package knows nothing of torch.library, autograd or feature levels: a launcher takes tensors
that were already validated, with the output already allocated, so the interpreter
(``TRITON_INTERPRET=1``) can run and test it alone on CPU tensors.  Imports inside are relative
(see setup.py for why this folder is not installed as a top-level ``triton_kernels``).
"""
from .gather_nd import gather_nd_triton
from .scatter_nd import scatter_nd_check_triton, scatter_nd_triton, scatter_nd_triton_supports
from .top_k1 import top_k1_triton, top_k1_triton_supports

__all__ = ["gather_nd_triton", "scatter_nd_check_triton", "scatter_nd_triton",
           "scatter_nd_triton_supports", "top_k1_triton", "top_k1_triton_supports"]
