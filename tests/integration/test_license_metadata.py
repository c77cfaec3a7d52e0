"""Building ragline prints no deprecation warning about its license: ``project.license`` is the SPDX
expression (PEP 639), which setuptools 77 and later write as ``License-Expression``; the TOML table
form made every install warn."""

from __future__ import annotations

import shutil
import tomllib
import zipfile
from pathlib import Path

from tests.integration.test_packaging import NOT_COPIED, PIP, REPO, _check, _dist_info, _stock, _wheelhouse


def test_the_wheel_declares_its_license_without_a_warning(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(
        REPO,
        src,
        ignore=lambda folder, names: {
            n
            for n in names
            if n == "__pycache__" or n.endswith(".egg-info") or (Path(folder) == REPO and n in NOT_COPIED)
        },
    )
    wheelhouse = _wheelhouse()
    _stock(wheelhouse, tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"])
    built = _check(
        [*PIP, "wheel", "-v", "--no-deps", "--no-index", "--find-links", wheelhouse, "-w", tmp_path, src]
    )
    output = built.stdout + built.stderr
    assert "project.license" not in output and "License classifiers are deprecated" not in output, output
    (wheel,) = tmp_path.glob("ragline-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read(f"{_dist_info(wheel)}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in meta.splitlines()
