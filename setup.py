"""Packaging for torch_dml_ops.

The repository keeps the Triton kernels in a top-level ``triton_kernels/`` folder (the design
card's layout), but it is installed as ``torch_dml_ops.triton_kernels``: PyPI's ``triton-kernels``
distribution, and triton's own ``python/triton_kernels``, install a top-level package of that
name, and two distributions owning the same files would shadow each other.  ``package_dir`` maps
the folder under our package, so the wheel holds exactly one top-level package, ``torch_dml_ops``
(tests/test_packaging.py checks it); the kernels use relative imports only.
"""
import glob

from setuptools import Extension, setup

# The native CPU kernels (plain C11 + pthreads, no torch headers, so the build needs only a C
# compiler and never pulls torch into pip's build environment).  Optional: where no compiler is
# found the build warns and the package falls back to the portable torch path on the CPU.
native = Extension(
    "torch_dml_ops._cpu_kernels",
    sources=sorted(glob.glob("torch_dml_ops/csrc/*.c")),
    depends=sorted(glob.glob("torch_dml_ops/csrc/*.h")),
    extra_compile_args=["-O3", "-std=gnu11", "-pthread", "-fvisibility=hidden",
                        "-fno-strict-aliasing"],
    extra_link_args=["-pthread"],
    optional=True,
)

setup(
    name="torch_dml_ops",
    version="0.1.0",
    description="DirectML's GatherND, ScatterND and TopK1 as PyTorch operators "
                "(Triton GPU kernels, native CPU kernels, portable torch fallback, autograd, "
                "torch.compile/export)",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=["torch_dml_ops", "torch_dml_ops.bench", "torch_dml_ops.triton_kernels"],
    # PEP 561: the package ships its type annotations.
    package_data={"torch_dml_ops": ["py.typed"]},
    package_dir={"torch_dml_ops": "torch_dml_ops", "torch_dml_ops.triton_kernels": "triton_kernels"},
    ext_modules=[native],
    # torch.library.triton_op / register_fake / register_autograd / opcheck: torch 2.6 and newer.
    install_requires=["torch>=2.6"],
    extras_require={
        # Triton is optional: without it the portable path runs everywhere.
        "triton": ["triton>=3.0"],
        "test": ["pytest", "hypothesis", "numpy", "triton>=3.0"],
        # python -m torch_dml_ops.bench: the peers it compares with, and the plot.  Never needed
        # by the tests (their peer tests skip without them).
        "bench": ["numpy", "matplotlib", "onnx", "onnxruntime", "jax",
                  "tensorflow-cpu; platform_machine == 'x86_64'",
                  "tensorflow; platform_machine != 'x86_64'"],
    },
    license="MIT",
)
