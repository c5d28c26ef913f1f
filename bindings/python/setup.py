"""pip packaging of the ferry module CMake built (this file is copied to
<build>/python). Offline, into a virtual environment that sees Debian's
numpy and torch:

    python3 -m venv --system-site-packages venv
    venv/bin/pip install --no-index --no-build-isolation <build>/python

The package carries libferry and the transport plugins beside the
extension (its RPATH has $ORIGIN/_lib; the loader looks for plugins in
<libferry's dir>/ferry/plugins), so it works without the build tree.
"""

import glob
import os
import shutil

from setuptools import setup
from setuptools.dist import Distribution

here = os.path.dirname(os.path.abspath(__file__))
built_lib = os.path.normpath(os.path.join(here, "..", "lib"))
stage = os.path.join(here, "_pip_stage")


def _stage():
    # A copy, so the build tree's own package never sees _lib.
    shutil.rmtree(stage, ignore_errors=True)
    shutil.copytree(os.path.join(here, "ferry"), os.path.join(stage, "ferry"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    lib = os.path.join(stage, "ferry", "_lib")
    os.makedirs(os.path.join(lib, "ferry", "plugins"))
    libferry = glob.glob(os.path.join(built_lib, "libferry.so.0"))
    if not libferry:
        raise SystemExit("setup.py: %s/libferry.so.0 not found: build ferry with CMake first"
                         % built_lib)
    shutil.copy2(os.path.realpath(libferry[0]), os.path.join(lib, "libferry.so.0"))
    for plugin in glob.glob(os.path.join(built_lib, "ferry", "plugins", "libferry-*.so")):
        shutil.copy2(plugin, os.path.join(lib, "ferry", "plugins"))


class _BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # a platform wheel: the extension is prebuilt


_stage()
setup(
    name="ferry",
    version="0.1.0",
    description="Distributed RPC with torch.distributed.rpc's programming model",
    packages=["ferry"],
    package_dir={"ferry": os.path.join("_pip_stage", "ferry")},
    package_data={"ferry": ["_ferry*.so", "_lib/*.so*", "_lib/ferry/plugins/*.so"]},
    install_requires=[],  # numpy (and torch, if used) come from Debian
    distclass=_BinaryDistribution,
    zip_safe=False,
)
