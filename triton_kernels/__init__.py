"""Triton kernels, their launchers and the op kernels, installed as
``torch_dml_ops.triton_kernels``.

One module per op.  A launcher (``*_triton``) takes tensors that were already validated, with the
output already allocated, so the interpreter (``TRITON_INTERPRET=1``) can run and test it alone
on CPU tensors.  Each module's ``KERNELS`` are the op kernels (the backend protocol, see
``torch_dml_ops._backend``): the portable path's validation shell around the launcher, registered
for the CUDA dispatch key.  Imports inside are relative (see setup.py for why this folder is not
installed as a top-level ``triton_kernels``).
"""
from . import gather_nd as _gather_nd, scatter_nd as _scatter_nd, top_k1 as _top_k1
from .gather_nd import gather_nd_triton
from .scatter_nd import scatter_nd_check_triton, scatter_nd_triton, scatter_nd_triton_supports
from .top_k1 import top_k1_triton, top_k1_triton_supports

__all__ = ["gather_nd_triton", "scatter_nd_check_triton", "scatter_nd_triton",
           "scatter_nd_triton_supports", "top_k1_triton", "top_k1_triton_supports"]

#: op name -> kernel with the op's schema.
KERNELS = {**_gather_nd.KERNELS, **_scatter_nd.KERNELS, **_top_k1.KERNELS}
