"""The portable path: every op written with torch ops only, for every device torch runs on.

It is the reference implementation (the other backends are tested bit for bit against it) and
the ``CompositeExplicitAutograd`` kernel: it runs on every device without a C++ (CPU) or Triton
(CUDA) kernel, and on the CPU when the C++ extension is not built.  One module per op, each with
its ``KERNELS`` (the backend protocol, see ``_backend``); ``_common`` holds what they share.
"""
from . import gather_nd, scatter_nd, top_k1

#: op name -> kernel with the op's schema.
KERNELS = {**gather_nd.KERNELS, **scatter_nd.KERNELS, **top_k1.KERNELS}
