"""Builds the Python package `tdist`: tdist's engines as a torch.distributed backend.

    pip install .          # from the repository's root, with the python whose torch to use

The extension is compiled by the repository's CMake build against the torch that the
installing interpreter has (its LibTorch headers and libraries come with the torch wheel),
so the package pins that torch version. Under pip's build isolation that torch is not
importable, so it is looked up with the same interpreter in isolated mode (-I).
Set TDIST_BUILD_JOBS to limit parallel compile jobs (default: all cores), and
TDIST_CMAKE_BUILD_DIR to build in an existing CMake tree configured against the same
torch (scripts/build.sh --torch2 makes one): its settings are kept and only the extension
is added, so what is built there already is not compiled again.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent

_TORCH_QUERY = r"""
import json, os, torch
info = {"version": torch.__version__.split("+")[0],
        "dir": os.path.dirname(torch.__file__),
        "abi": [f"{k[1:]}=\"{getattr(torch._C, k)}\"" for k in
                ("_PYBIND11_COMPILER_TYPE", "_PYBIND11_STDLIB", "_PYBIND11_BUILD_ABI")
                if getattr(torch._C, k, None)]}
info["cmake"] = getattr(torch.utils, "cmake_prefix_path", os.path.join(info["dir"], "share", "cmake"))
print(json.dumps(info))
"""


def torch_info():
    """Version, folder, CMake prefix and pybind11 ABI of the installing interpreter's torch."""
    import json

    for args in ([sys.executable, "-c", _TORCH_QUERY], [sys.executable, "-I", "-c", _TORCH_QUERY]):
        run = subprocess.run(args, capture_output=True, text=True, check=False)
        if run.returncode == 0:
            return json.loads(run.stdout.strip().splitlines()[-1])
    sys.exit("tdist: torch is not installed for " + sys.executable + "; install it first "
             "(pip install torch), then pip install this package with the same python")


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(tdist VERSION ([0-9.]+)", text).group(1)


class CMakeBuild(build_ext):
    """Builds tdist._C with the repository's CMake (target tdist_python)."""

    def build_extension(self, ext):
        info = TORCH
        python = [
            "-DTDIST_BUILD_PYTHON=ON",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DTDIST_PYBIND11_ABI_DEFINITIONS=" + ";".join(info["abi"]),
        ]
        existing = os.environ.get("TDIST_CMAKE_BUILD_DIR")
        if existing:
            build = Path(existing).resolve()
            configure = ["cmake", "-S", str(ROOT), "-B", str(build)] + python
        else:
            build = Path(self.build_temp).resolve() / "cmake"
            configure = self.configure_args(build, info) + python
        jobs = os.environ.get("TDIST_BUILD_JOBS", str(os.cpu_count() or 1))
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "tdist_python", "-j", jobs],
                       check=True)
        built = next((build / "src" / "python").glob("_C*.so"))
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)

    @staticmethod
    def configure_args(build, info):
        """A fresh tree: the library and the extension only, against the given torch."""
        torch_dir = info["dir"]
        return [
            "cmake", "-S", str(ROOT), "-B", str(build),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DTDIST_BUILD_TESTS=OFF",
            "-DTDIST_BUILD_EXAMPLES=OFF", "-DTDIST_BUILD_BENCHMARKS=OFF",
            # The backend serves auto/tcp/shm: no MPI in the extension, and no nccl backend
            # (torch brings its own NCCL, whose libnccl.so.2 the loader would share with it).
            "-DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON", "-DTDIST_CUDA=OFF",
            # No CUDA code is compiled here: fixing the list skips torch's GPU probe.
            "-DTORCH_CUDA_ARCH_LIST=" + os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0"),
            # torch's own lib/ first, so that no other LibTorch on the system is taken.
            f"-DCMAKE_PREFIX_PATH={info['cmake']};{torch_dir}",
        ]


TORCH = torch_info()

setup(
    name="tdist",
    version=project_version(),
    description="tdist's native C++ engines as a torch.distributed backend",
    packages=["tdist"],
    package_dir={"": "python"},
    ext_modules=[Extension("tdist._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    install_requires=[f"torch=={TORCH['version']}"],
    python_requires=">=3.9",
    zip_safe=False,
    # Not build/: that is the C++ build tree of scripts/build.sh.
    options={"build": {"build_base": "build-python"}},
)
