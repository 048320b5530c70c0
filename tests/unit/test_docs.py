"""The user documentation cannot drift from the code: every CLI flag and every metric is
documented, and the Python API example runs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from pytriton_core.cli import build_parser
from pytriton_core.metrics import FAMILIES

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _table_rows(text: str) -> dict[str, str]:
    """First-cell code spans of markdown table rows -> the row's last cell."""
    rows: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        for name in re.findall(r"`([^`]+)`", cells[0]):
            rows[name] = cells[-1]
    return rows


def test_every_cli_flag_is_documented_with_a_meaning() -> None:
    rows = _table_rows((DOCS / "configuration.md").read_text())
    flags = [
        flag
        for action in build_parser()._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag != "--help"
    ]
    assert flags
    missing = [flag for flag in flags if flag not in rows]
    assert missing == [], f"add these flags to docs/configuration.md: {missing}"
    assert all(rows[flag] for flag in flags)
    unknown = [name for name in rows if name.startswith("--") and name not in flags]
    assert unknown == [], f"docs/configuration.md lists flags the server lacks: {unknown}"


def test_every_metric_is_documented_with_its_type_and_a_meaning() -> None:
    text = (DOCS / "metrics.md").read_text()
    documented = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and cells[0].startswith("`nv_"):
            documented[cells[0].strip("`")] = (cells[1], cells[2])
    table = {family.name: family.kind.value for family in FAMILIES}
    assert {name: kind for name, (kind, _) in documented.items()} == table
    assert all(meaning for _, meaning in documented.values())


def test_python_api_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (DOCS / "python-api.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", text, re.S)
    monkeypatch.chdir(ROOT)
    assert os.path.isdir("examples/model_repository")
    exec(compile(example, str(DOCS / "python-api.md"), "exec"), {"__name__": "__doc_example__"})


def _floor_parts() -> list[str]:
    """The parts of the layers contract in pyproject.toml, top floor first."""
    text = (ROOT / "pyproject.toml").read_text()
    (layers,) = re.findall(r'type = "layers"\n.*?layers = \[(.*?)\]', text, re.S)
    return [part.strip() for floor in re.findall(r'"([^"]+)"', layers) for part in floor.split("|")]


def test_every_module_of_the_package_has_a_floor_and_the_architecture_page_names_it() -> None:
    package = ROOT / "src" / "pytriton_core"
    top_level = {
        path.stem if path.is_file() else path.name
        for path in package.iterdir()
        if (path.suffix == ".py" or (path / "__init__.py").is_file())
        and path.stem not in ("__init__", "__main__", "_native")
    }
    parts = _floor_parts()
    assert sorted(top_level - set(parts)) == [], "give these a floor in pyproject.toml"
    page = (DOCS / "architecture.md").read_text()
    unnamed = [part for part in parts if f"`{part}`" not in page]
    assert unnamed == [], f"docs/architecture.md names no floor for {unnamed}"
