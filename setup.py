"""Packaging for torch_dml_ops.

The repository keeps the Triton kernels in a top-level ``triton_kernels/`` folder (the design
card's layout), but it is installed as ``torch_dml_ops.triton_kernels``: PyPI's ``triton-kernels``
distribution, and triton's own ``python/triton_kernels``, install a top-level package of that
name, and two distributions owning the same files would shadow each other.  ``package_dir`` maps
the folder under our package, so the wheel holds exactly one top-level package, ``torch_dml_ops``
(tests/test_packaging.py checks it); the kernels use relative imports only.

The C++ extension (``torch_dml_ops/_C.abi3.so``: op schemas and CPU kernels, ``csrc/``) is built
against torch's stable ABI, whose headers ship in the torch wheel.  How the build sees torch:
torch is deliberately *not* a build requirement (pip would install a second, several-GB torch
into its isolated build environment).  The build compiles against the torch installed in the
environment it installs into: ``import torch`` where the build runs in that environment
(``--no-build-isolation``), else that environment's site-packages, found by path (pip's default
isolated build keeps the target interpreter and its install scheme, only hides its packages).
The extension uses no Python API at all (it is loaded with ``torch.ops.load_library``), so the
one binary serves every CPython 3.9+ (``abi3``) and every torch that keeps the stable ABI of
``TORCH_TARGET_VERSION``.  Without a C++ compiler, or without torch's headers, the build warns
and the package runs on the portable torch path on the CPU.
"""
import glob
import os
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: The stable-ABI version the kernels are written against (torch 2.10: parallel_for,
#: get_num_threads, std::string arguments).  Tested with torch 2.13 (README).
TORCH_TARGET_VERSION = "0x020a000000000000"


def _torch_dir():
    """The installed torch's package folder, or None."""
    try:
        import torch  # the environment's own torch (--no-build-isolation)
        return os.path.dirname(torch.__file__)
    except ImportError:
        pass
    for key in ("purelib", "platlib"):   # under pip's isolated build: the target environment
        d = os.path.join(sysconfig.get_paths()[key], "torch")
        if os.path.isfile(os.path.join(d, "include", "torch", "csrc", "stable", "library.h")):
            return d
    return None


class OptionalBuildExt(build_ext):
    """Build the C++ kernels where possible; warn (never fail the install) where not."""

    def run(self):
        try:
            super().run()
        except Exception as e:  # no compiler at all
            self._warn(e)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # compiler missing or failing
            self._warn(e)

    @staticmethod
    def _warn(e):
        sys.stderr.write(
            f"\nWARNING: torch_dml_ops: the C++ kernels were not built ({e}).\n"
            "The package works without them (CPU calls run the portable torch path, slower).\n"
            "To build them, install a C++17 compiler and reinstall.\n\n")


ext_modules = []
_TORCH = _torch_dir()
if _TORCH is None:
    sys.stderr.write(
        "\nWARNING: torch_dml_ops: torch is not installed where this build can see it, so the "
        "C++ kernels are not built.\nInstall torch first (pip install torch==2.13.0), then this "
        "package (pip install --no-build-isolation -e .).\n\n")
else:
    ext_modules.append(Extension(
        "torch_dml_ops._C",
        sources=sorted(glob.glob("torch_dml_ops/csrc/*.cpp")),
        depends=sorted(glob.glob("torch_dml_ops/csrc/*.h")),
        include_dirs=[os.path.join(_TORCH, "include")],
        library_dirs=[os.path.join(_TORCH, "lib")],
        libraries=["torch_cpu", "c10"],
        define_macros=[("TORCH_TARGET_VERSION", TORCH_TARGET_VERSION),
                       ("Py_LIMITED_API", "0x03090000")],
        extra_compile_args=["-O3", "-std=c++17", "-fvisibility=hidden", "-fno-strict-aliasing"],
        # torch's libraries sit next to ours in site-packages; an in-process load finds them
        # already loaded by `import torch`.
        extra_link_args=["-Wl,-rpath,$ORIGIN/../torch/lib"],
        py_limited_api=True,
        language="c++",
    ))

setup(
    name="torch_dml_ops",
    version="0.2.0",
    description="DirectML's GatherND, ScatterND and TopK1 as PyTorch operators "
                "(C++ CPU kernels on torch's stable ABI, Triton GPU kernels, portable torch path, "
                "autograd, torch.compile/export/AOTInductor)",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=["torch_dml_ops", "torch_dml_ops.bench", "torch_dml_ops.portable",
              "torch_dml_ops.distributed", "torch_dml_ops.onnx", "torch_dml_ops.triton_kernels"],
    # PEP 561: the package ships its type annotations.
    package_data={"torch_dml_ops": ["py.typed", "csrc/*.h", "csrc/*.cpp"]},
    package_dir={"torch_dml_ops": "torch_dml_ops", "torch_dml_ops.triton_kernels": "triton_kernels"},
    ext_modules=ext_modules,
    cmdclass={"build_ext": OptionalBuildExt},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
    # torch.library.register_fake / register_vmap, the stable ABI of TORCH_TARGET_VERSION.
    install_requires=["torch>=2.10"],
    extras_require={
        # Triton is optional: without it the portable path runs everywhere.  Its CPU interpreter
        # (TRITON_INTERPRET=1, the main job's Triton run on a machine without a GPU) needs numpy.
        "triton": ["triton>=3.0", "numpy"],
        # torch_dml_ops.onnx: export to ONNX's GatherND / ScatterND / TopK (onnxscript writes the
        # translations, onnxruntime runs the demo and the tests).
        "onnx": ["onnx>=1.16", "onnxscript>=0.5", "onnxruntime>=1.20"],
        "test": ["pytest", "hypothesis", "numpy", "triton>=3.0",
                 "onnx>=1.16", "onnxscript>=0.5", "onnxruntime>=1.20"],
        # python -m torch_dml_ops.bench: the peers it compares with, and the plot.  Never needed
        # by the tests (their peer tests skip without them).
        "bench": ["numpy", "matplotlib", "onnx", "onnxruntime", "jax",
                  "tensorflow-cpu; platform_machine == 'x86_64'",
                  "tensorflow; platform_machine != 'x86_64'"],
    },
    license="MIT",
)
