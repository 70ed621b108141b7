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
one binary serves every CPython 3.10+ (``abi3``; the floor torch has no wheel for 3.9) and
every torch from ``TORCH_FLOOR`` on, whose stable ABI (``TORCH_TARGET_VERSION``) it is built for;
it compiles against the headers of every torch from the floor on.

torch is not in ``install_requires`` either: installing this package never changes the user's
torch (a requirement would let pip downgrade a newer torch, upgrade an older one, or swap a CUDA
build for another).  The floor is checked where it matters instead: the build refuses a torch
below it, and so does ``import torch_dml_ops``; a torch newer than the newest tested release
(``TORCH_TESTED``) imports with one warning.  ``pip install torch_dml_ops[torch]`` asks pip for a
torch of the floor or newer, for an environment that has none.

A build that cannot compile the extension fails, quoting the compiler's errors (without a C++
compiler, without torch's headers where the build can see them, or where the sources do not
compile against that torch): a wheel without the kernels is never made silently.  For a machine
without a compiler, ``TORCH_DML_OPS_SKIP_EXTENSION=1`` builds the package without them, saying
so; the reason is left in ``torch_dml_ops/_C.build-error.txt``, which the warning at import
repeats, and the package then runs the portable torch path on the CPU.
"""
import glob
import json
import os
import re
import runpy
import sys
import sysconfig
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
# setuptools' PEP 660 command (setuptools 64+; pyproject.toml asks for 70.1+)
from setuptools.command.editable_wheel import editable_wheel



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


#: Set to 1 to build the package without the C++ kernels where they cannot be compiled (no
#: compiler): the build then warns instead of failing.
SKIP_ENV = "TORCH_DML_OPS_SKIP_EXTENSION"
#: Beside the built extension: why the last build of it failed (read by the import warning).
BUILD_ERROR_FILE = "_C.build-error.txt"


def _skip_allowed() -> bool:
    return os.environ.get(SKIP_ENV, "0").strip() not in ("", "0")


def _torch_version() -> str:
    try:
        with open(os.path.join(_TORCH, "version.py"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("__version__"):
                    return line.split("=", 1)[1].strip().strip("'\"")
    except OSError:
        pass
    return "unknown"


#: The op schemas, written once in this file (plain data: read here without importing torch).
SCHEMAS_FILE = os.path.join("torch_dml_ops", "_schemas.py")
#: The dtype tables and constants, written once in this file (plain data too).
DATA_FILE = os.path.join("torch_dml_ops", "_data.py")


def _plain_data(name: str) -> dict:
    return runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), name))


#: The torch releases supported and tested (the version policy: docs/packaging.md).
_VERSIONS = _plain_data(DATA_FILE)
TORCH_FLOOR = _VERSIONS["TORCH_FLOOR"]
TORCH_TESTED = _VERSIONS["TORCH_TESTED"]
#: What pip is told where it is asked (the ``torch`` extra): the floor, no upper bound.
TORCH_REQUIREMENT = f"torch>={TORCH_FLOOR}"


def _release(version: str) -> tuple:
    """(major, minor) of a torch version string ("2.15.0+cu132", "2.16.0.dev20261201")."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


#: The stable-ABI version the kernels are written against: the floor's (torch 2.10:
#: parallel_for, get_num_threads, std::string arguments), as torch's TORCH_TARGET_VERSION macro
#: spells it (0xMMmm000000000000).
TORCH_TARGET_VERSION = "0x{:02x}{:02x}000000000000".format(*_release(TORCH_FLOOR))
#: The oldest Python supported: the floor torch's (python_requires, the limited API, the tag).
PYTHON_FLOOR = _VERSIONS["TORCH_FLOOR_PYTHON"]
_PY = _release(PYTHON_FLOOR)


def _schemas_text() -> str:
    """``kSchemas``: every schema of SCHEMAS_FILE (its SCHEMAS, then EXTENSION_SCHEMAS) as a C++
    string, for registration.cpp."""
    found = _plain_data(SCHEMAS_FILE)
    schemas = list(found["SCHEMAS"].values()) + list(found["EXTENSION_SCHEMAS"].values())
    return ("static constexpr const char* kSchemas[] = {\n"
            + "".join(f"    {json.dumps(s)},\n" for s in schemas) + "};\n")


def _data_text() -> str:
    """DATA_FILE's tables, constants and messages as C++ (namespace tdo, after ScalarType:
    common.h)."""
    d = _plain_data(DATA_FILE)
    scalar = {name: enum for name, enum, _, _ in d["DTYPES"]}
    rows = "".join(f"    {{ScalarType::{enum}, {json.dumps('torch.' + name)}, "
                   f"{json.dumps(dml_name)}}},\n"
                   for name, enum, dml_name, _ in d["DTYPES"])

    def dtypes(names):
        return ", ".join(f"ScalarType::{scalar[n]}" for n in names)

    def strings(xs):
        return ", ".join(json.dumps(x) for x in xs)

    return (f"constexpr int64_t kNoError = {d['NO_ERROR']}LL;\n"
            f"constexpr int kMaxThreads = {d['MAX_THREADS']};\n"
            f"constexpr int64_t kOverlapWork = {d['OVERLAP_WORK']};\n"
            f"constexpr const char* kPermissiveName = {json.dumps(d['PERMISSIVE_NAME'])};\n"
            "struct DtypeRow {\n  ScalarType t;\n  const char* torch_name;\n"
            "  const char* dml_name;\n};\n"
            f"constexpr DtypeRow kDtypes[] = {{\n{rows}}};\n"
            f"constexpr ScalarType kIndexDtypes[] = {{{dtypes(d['INDEX_DTYPES'])}}};\n"
            f"constexpr ScalarType kTopkIndexDtypes[] = {{{dtypes(d['TOPK_INDEX_DTYPES'])}}};\n"
            f"constexpr const char* kReductionNames[] = {{{strings(d['REDUCTIONS'])}}};\n"
            f"constexpr const char* kDirectionNames[] = {{{strings(d['DIRECTIONS'])}}};\n"
            # the rules' messages (fill() in checks.cpp, as Python's str.format)
            "namespace msg {\n"
            + "".join(f"constexpr const char* {key} = {json.dumps(text)};\n"
                      for key, text in d["MESSAGES"].items() if key not in d["LEVEL_MESSAGES"])
            + "}  // namespace msg\n")


#: The C++ headers generated into the build folder: file name -> (source, text).
GENERATED = {"tdo_schemas.inc": (SCHEMAS_FILE, _schemas_text),
             "tdo_data.inc": (DATA_FILE, _data_text)}


def _write_generated(folder: str) -> None:
    """Every GENERATED header into ``folder`` (each rewritten only when it changes)."""
    for header, (source, make) in GENERATED.items():
        _write_if_changed(os.path.join(folder, header),
                          f"// Generated by setup.py from {source.replace(os.sep, '/')}: do not "
                          f"edit.\n{make()}")


def _write_if_changed(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except OSError:
        pass
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


class CheckedBuildExt(build_ext):
    """Build the C++ kernels; where they cannot be built, say why: the compiler's own errors, on
    stderr, and fail the build, unless TORCH_DML_OPS_SKIP_EXTENSION=1, which leaves the reason
    in ``_C.build-error.txt`` beside the package for the import warning to quote and finishes
    the build without the extension."""

    def run(self):
        self._failure = None
        self._compiled = False      # whether a compile was tried (else the reason is ours)
        if _TORCH is None:
            self._failure = (RuntimeError(_NO_TORCH), "")
        elif _release(_torch_version()) < _release(TORCH_FLOOR):
            self._failure = (RuntimeError(
                f"torch {_torch_version()} is older than {TORCH_FLOOR}, whose stable ABI the "
                f"kernels are built for (supported: {TORCH_REQUIREMENT}); upgrade torch first "
                f"(for example: pip install 'torch>={TORCH_FLOOR}'), then reinstall this "
                f"package"), "")
        else:
            self._compiled = True
            try:
                super().run()
            except Exception as e:  # no compiler at all, or nothing to copy after a failure
                self._failure = self._failure or (e, "")
        for ext in self.extensions:
            self._settle(ext)

    def build_extension(self, ext):
        # The compiler's diagnostics: fd 2 goes to a file for the build (whatever setuptools
        # version runs the compiler, and however), then is echoed and kept for the message.
        generated = os.path.join(self.build_temp, "generated")
        _write_generated(generated)
        if generated not in ext.include_dirs:
            ext.include_dirs.append(generated)
        with tempfile.TemporaryFile() as f:
            sys.stderr.flush()
            saved = os.dup(2)
            os.dup2(f.fileno(), 2)
            try:
                super().build_extension(ext)
            except Exception as e:  # compiler missing or failing
                self._failure = (e, "")
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                f.seek(0)
                output = f.read().decode("utf-8", "replace")
                sys.stderr.write(output)
        if self._failure and not self._failure[1]:
            self._failure = (self._failure[0], output)

    def _targets(self, ext):
        """Where the extension goes: the build folder, and the source tree for an in-place
        (editable) build."""
        inplace = self.inplace
        try:
            self.inplace = False
            paths = [self.get_ext_fullpath(ext.name)]
            if inplace:
                self.inplace = True
                paths.append(self.get_ext_fullpath(ext.name))
        finally:
            self.inplace = inplace
        return paths

    def _settle(self, ext):
        """A failed build leaves the reason beside the package, and no extension: not an
        older one built against another torch, which the package would load without a word.
        A successful one removes an old reason."""
        records = [os.path.join(os.path.dirname(t), BUILD_ERROR_FILE) for t in self._targets(ext)]
        if self._failure is None:
            for record in records:
                if os.path.exists(record):
                    os.remove(record)
            return
        e, output = self._failure
        errors = [ln for ln in output.splitlines() if re.search(r"(^|: )(fatal )?error\b", ln)]
        if _TORCH is None or not self._compiled:
            why = str(e)
        elif errors:
            why = (f"its sources do not compile against torch {_torch_version()} (this package "
                   f"supports {TORCH_REQUIREMENT}); the compiler said:\n"
                   + "\n".join("    " + ln for ln in errors[:20]))
        else:
            why = f"{e} (is a C++17 compiler installed?)"
        text = f"the C++ extension was not built: {why}"
        for target, record in zip(self._targets(ext), records):
            if os.path.exists(target):
                os.remove(target)
        too_old = _TORCH is not None and not self._compiled   # no way around the floor
        if too_old or not _skip_allowed():
            raise SystemExit(f"torch_dml_ops: {text}" + ("" if too_old else (
                f"\nTo install without the C++ kernels (CPU calls then run the portable torch "
                f"path, slower), set {SKIP_ENV}=1.")))
        for record in records:
            os.makedirs(os.path.dirname(record), exist_ok=True)
            with open(record, "w", encoding="utf-8") as f:
                f.write(why + "\n")
        bar = "=" * 78
        sys.stderr.write(f"\n{bar}\nWARNING: torch_dml_ops: {text}\n{SKIP_ENV}=1: the package "
                         "is installed without it (CPU calls run the portable torch path, "
                         f"slower).\n{bar}\n\n")


class StrictEditableWheel(editable_wheel):
    """``pip install -e .`` in setuptools' strict mode unless another mode is asked for
    (``--config-settings editable_mode=...``): a tree of links to the checkout whose folder goes
    on ``sys.path``, which type checkers (mypy, pyright) resolve; the default lenient mode is an
    import hook, which they cannot follow (the mapped ``triton_kernels`` folder rules out a plain
    path there).  A file added to the package needs the install rerun."""

    def finalize_options(self):
        if self.mode is None:
            self.mode = "strict"
        super().finalize_options()


_TORCH = _torch_dir()
_NO_TORCH = ("torch is not installed where this build can see it.  Install torch first (for "
             "example: pip install torch==2.13.0), then this package in the same environment "
             "(pip install -e . from a checkout); to build a wheel: pip wheel --no-build-isolation "
             "--no-deps . or python -m build --wheel --no-isolation (torch is not a build "
             "requirement: an isolated build would install a second torch)")
ext_modules = [Extension(
    "torch_dml_ops._C",
    sources=sorted(glob.glob("torch_dml_ops/csrc/*.cpp")),
    depends=sorted(glob.glob("torch_dml_ops/csrc/*.h")) + [SCHEMAS_FILE, DATA_FILE],
    include_dirs=[os.path.join(_TORCH, "include")] if _TORCH else [],
    library_dirs=[os.path.join(_TORCH, "lib")] if _TORCH else [],
    libraries=["torch_cpu", "c10"],
    define_macros=[("TORCH_TARGET_VERSION", TORCH_TARGET_VERSION),
                   ("Py_LIMITED_API", "0x{:02X}{:02X}0000".format(*_PY))],
    # -Wall whatever Python's own flags: the sources compile without a warning (tests/test_packaging.py)
    extra_compile_args=["-O3", "-std=c++17", "-Wall", "-fvisibility=hidden",
                        "-fno-strict-aliasing"],
    # torch's libraries sit next to ours in site-packages; an in-process load finds them
    # already loaded by `import torch`.
    extra_link_args=["-Wl,-rpath,$ORIGIN/../torch/lib"],
    py_limited_api=True,
    language="c++",
)]

setup(
    name="torch_dml_ops",
    version="0.2.0",
    description="DirectML's GatherND, ScatterND and TopK1 as PyTorch operators "
                "(C++ CPU kernels on torch's stable ABI, Triton GPU kernels, portable torch path, "
                "autograd, torch.compile/export/AOTInductor)",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=f">={PYTHON_FLOOR}",
    packages=["torch_dml_ops", "torch_dml_ops.bench", "torch_dml_ops.portable",
              "torch_dml_ops.distributed", "torch_dml_ops.onnx", "torch_dml_ops.triton_kernels"],
    # PEP 561: the package ships its type annotations.
    package_data={"torch_dml_ops": ["py.typed", "csrc/*.h", "csrc/*.cpp"]},
    package_dir={"torch_dml_ops": "torch_dml_ops", "torch_dml_ops.triton_kernels": "triton_kernels"},
    ext_modules=ext_modules,
    cmdclass={"build_ext": CheckedBuildExt, "editable_wheel": StrictEditableWheel},
    options={"bdist_wheel": {"py_limited_api": "cp{}{}".format(*_PY)}},
    # No torch here: installing never changes the user's torch (the module docstring); the
    # floor is checked by the build and at import, and the ``torch`` extra asks pip for one.
    install_requires=[],
    extras_require={
        "torch": [TORCH_REQUIREMENT],
        # Triton is optional: without it the portable path runs everywhere.  Its CPU interpreter
        # (TRITON_INTERPRET=1, the main job's Triton run on a machine without a GPU) needs numpy.
        "triton": ["triton>=3.0", "numpy"],
        # torch_dml_ops.onnx: export to ONNX's GatherND / ScatterND / TopK (onnxscript writes the
        # translations, onnxruntime runs the demo and the tests).
        "onnx": ["onnx>=1.16", "onnxscript>=0.5", "onnxruntime>=1.20"],
        # setuptools: tests/test_packaging.py builds the wheel without build isolation, which
        # needs bdist_wheel in setuptools itself (70.1+; torch 2.10 does not bring setuptools).
        # mypy: tests/test_typing.py.
        # build: tests/test_packaging.py checks what an isolated PEP 517 build does.
        "test": ["pytest", "hypothesis", "numpy", "triton>=3.0", "mypy",
                 "onnx>=1.16", "onnxscript>=0.5", "onnxruntime>=1.20", "setuptools>=70.1",
                 "build"],
        # python -m torch_dml_ops.bench: the peers it compares with, and the plot.  Never needed
        # by the tests (their peer tests skip without them).
        "bench": ["numpy", "matplotlib", "onnx", "onnxruntime", "jax",
                  "tensorflow-cpu; platform_machine == 'x86_64'",
                  "tensorflow; platform_machine != 'x86_64'"],
    },
    license="MIT",
)
