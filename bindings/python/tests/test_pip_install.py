"""The package installs offline with pip into a virtual environment that
sees Debian's packages, and works there without the build tree."""

import os
import subprocess
import sys
import venv

import pytest

import ferry

PROGRAM = r"""
import os, sys, numpy as np, ferry
assert "build" not in os.path.dirname(ferry.__file__).split(os.sep)[-3:], ferry.__file__
ferry.init_rpc("solo", backend="tcp", store="127.0.0.1:0", host_store=True)
print(ferry.rpc_sync("solo", max, args=(2, 5)), ferry.get_worker_info().name)
ferry.shutdown()
"""


def test_pip_install_into_a_venv(tmp_path):
    package = os.path.dirname(os.path.dirname(os.path.abspath(ferry.__file__)))
    if not os.path.exists(os.path.join(package, "setup.py")):
        pytest.skip("not running from a build tree")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = str(env_dir / "bin" / "python")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FERRY_PLUGIN_PATH")}
    # Debian's pip, run by the venv's Python: no network, no build isolation.
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation",
                    package], check=True, env=clean, cwd=tmp_path)
    out = subprocess.run([python, "-c", PROGRAM], check=True, env=clean, cwd=tmp_path,
                         capture_output=True, text=True)
    assert out.stdout.split() == ["5", "solo"]
