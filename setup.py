"""Builds the hmc package with CMake (the _hmc extension) and installs python/hmc."""
import os
import pathlib
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).parent.resolve()


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """HMC_CMAKE_BUILD_DIR reuses a configured build tree; otherwise build-pip/ is configured."""

    def build_extension(self, ext):
        build = os.environ.get("HMC_CMAKE_BUILD_DIR")
        if build is None:
            build = ROOT / "build-pip"
            subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja",
                                   "-DHMC_BUILD_TESTS=OFF", "-DCMAKE_BUILD_TYPE=Release"])
        build = pathlib.Path(build).resolve()
        subprocess.check_call(["cmake", "--build", str(build), "--target", "_hmc"])
        built = next((build / "python" / "hmc").glob("_hmc*.so"))
        dest = pathlib.Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, dest)


setup(
    name="hmc",
    version="0.1.0",
    description="Asynchronous heterogeneous-memory communication (UCX) with an asyncio API",
    package_dir={"": "python"},
    packages=["hmc"],
    ext_modules=[CMakeExtension("hmc._hmc")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.11",
)
