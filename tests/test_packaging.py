"""The installed package, not only a checkout, must carry its JSON Schemas."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_built_wheel_contains_every_schema_and_validates_from_it(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), "--quiet"], check=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("batchloaders-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(os.path.basename(n) for n in names if n.startswith("batchloaders/schemas/") and n.endswith(".json"))
    assert shipped == sorted(f for f in os.listdir(os.path.join(ROOT, "schemas")) if f.endswith(".json"))
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "batchloaders = batchloaders.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    # Unpack it somewhere unrelated to the checkout and validate a manifest with it alone.
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    manifest = tmp_path / "__manifest__.json"
    manifest.write_text(json.dumps({"compression": None, "allow_var_len": False, "features": [
        {"name": "x", "dtype": "float32", "shape": [2], "deserialize_type": "flaot"}]}))
    result = subprocess.run([sys.executable, "-m", "batchloaders", "validate", str(manifest)], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True)
    assert result.returncode == 1
    assert "$.features[0].deserialize_type" in result.stdout and "did you mean 'float'" in result.stdout
    probe = subprocess.run([sys.executable, "-c", "import batchloaders.config.schema as s; print(s.__file__)"],
                           cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True)
    assert probe.stdout.startswith(str(site))


def test_the_editable_install_warns_nothing_and_puts_the_checkout_on_sys_path(tmp_path):
    """`make setup` runs `pip install -e`, which runs this hook: a package mapped from another folder made
    setuptools install an import hook and warn ("Editable installation ... Please be careful with folders in
    your working directory ..."), which pip printed on every install."""
    code = ("import json, sys, warnings\nfrom setuptools import build_meta\n"
            "with warnings.catch_warnings(record=True) as caught:\n    warnings.simplefilter('always')\n"
            "    name = build_meta.build_editable(sys.argv[1])\n"
            "print(json.dumps([name, [f'{w.category.__name__}: {w.message}' for w in caught]]))")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                            check=True)
    name, warned = json.loads(result.stdout.splitlines()[-1])
    assert warned == []
    wheel = zipfile.ZipFile(tmp_path / name)
    pth = [n for n in wheel.namelist() if n.endswith(".pth")]
    assert pth == ["__editable__.batchloaders-0.1.0.pth"]
    assert wheel.read(pth[0]).decode().split() == [os.path.realpath(ROOT)]
