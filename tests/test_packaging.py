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
