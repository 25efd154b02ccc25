"""The sandbox images' Dockerfiles as ``farm images build`` hands them to docker: each kind's
``INCLUDE`` line replaced by the shared farm install (no docker needed here; the images
themselves are built by ``test_orchestration_docker.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from farm.cli.images import KINDS, dockerfile, source_hash

ROOT = Path(__file__).resolve().parents[1]
INSTALL = (ROOT / "sandbox_images" / "farm-install.dockerfile").read_text()


@pytest.mark.parametrize("kind", KINDS)
def test_dockerfile_has_the_farm_install_once_after_the_base(kind: str) -> None:
    text = dockerfile(ROOT, kind)
    instructions = [line.split()[0] for line in text.splitlines() if line[:1].isalpha()]
    assert "INCLUDE" not in instructions  # docker knows no such instruction
    assert text.count(INSTALL) == 1
    assert text.index("FROM ${BASE}") < text.index(INSTALL) < text.index("ENTRYPOINT")
    assert f"LABEL farm.kind={kind} " in text


def test_source_hash_follows_the_included_file(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "sandbox_images", tmp_path / "sandbox_images")
    before = source_hash(tmp_path, "toy")
    assert source_hash(tmp_path, "toy") == before
    included = tmp_path / "sandbox_images" / "farm-install.dockerfile"
    included.write_text(included.read_text() + "RUN true\n")
    assert source_hash(tmp_path, "toy") != before
