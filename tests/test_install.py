"""What an install brings: the broker needs no Spark, and the Spark extra's ranges hold.

``tools/metaServer.sh start local`` runs ``tools/setup-env.sh --broker-only``; ``tools/test``
runs it without, for ``.[test,spark]``. The slow test runs the broker-only set-up in a scratch
copy of the checkout (pip's cache makes it a local install) and checks its ``.venv``.
"""

from __future__ import annotations

import configparser
import importlib.metadata
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
SPARK_ONLY = {"pyspark", "pyarrow", "pandas", "numpy"}


def _setup_cfg() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser


def _requirements(text: str) -> dict[str, Requirement]:
    lines = [line.strip() for line in text.splitlines()]
    found = [Requirement(line) for line in lines if line and not line.startswith("#")]
    return {requirement.name: requirement for requirement in found}


def test_the_broker_requirements_name_no_spark_package():
    required = _requirements(_setup_cfg()["options"]["install_requires"])
    assert not SPARK_ONLY & set(required)
    test_extra = _requirements(_setup_cfg()["options.extras_require"]["test"])
    assert not SPARK_ONLY & set(test_extra)


def test_the_spark_extra_bounds_pyspark_and_pandas():
    spark = _requirements(_setup_cfg()["options.extras_require"]["spark"])
    assert spark["pyspark"].specifier.contains("4.0.0")
    assert not spark["pyspark"].specifier.contains("5.0.0")
    # PySpark 4.x warns about pandas >= 3 and needs >= 2.2.
    assert not spark["pandas"].specifier.contains("3.0.0")
    assert not spark["pandas"].specifier.contains("2.1.0")
    assert spark["pandas"].specifier.contains("2.2.3")


def test_the_installed_pyspark_lies_in_the_declared_range():
    spark = _requirements(_setup_cfg()["options.extras_require"]["spark"])
    version = importlib.metadata.version("pyspark")
    assert spark["pyspark"].specifier.contains(version), version


def test_tools_test_installs_the_test_and_spark_extras():
    script = (ROOT / "tools" / "setup-env.sh").read_text(encoding="utf-8")
    assert "FULL_ARGS=(-e '.[test,spark]' --config-settings editable_mode=compat)" in script
    server = (ROOT / "tools" / "metaServer.sh").read_text(encoding="utf-8")
    assert '"$ROOT/tools/setup-env.sh" --broker-only' in server


def _scratch_checkout(target: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, (item.decode() for item in listed)):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


@pytest.mark.slow
def test_broker_only_setup_creates_a_venv_without_pyspark(tmp_path):
    checkout = tmp_path / "checkout"
    _scratch_checkout(checkout)
    environment = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    environment.pop("VIRTUAL_ENV", None)
    result = subprocess.run(
        ["tools/setup-env.sh", "--broker-only"],
        cwd=checkout,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    python = checkout / ".venv" / "bin" / "python"
    probe = (
        "import importlib.util as u, meta.server.main, meta.client, kazoo, twisted\n"
        "print([m for m in ('pyspark', 'pyarrow', 'pandas', 'pytest') if u.find_spec(m)])"
    )
    found = subprocess.run(
        [str(python), "-I", "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[]"
    again = subprocess.run(
        ["tools/setup-env.sh", "--broker-only"],
        cwd=checkout,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0 and "python packages up to date" in again.stdout, again.stdout
