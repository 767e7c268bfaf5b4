"""docs/design.md's map of the packages agrees with the tree: every module it names
exists, every gateway module is named, and the import contracts' layers cover every
gateway module (a module in no layer could import anything)."""

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).parents[2]
DESIGN = (ROOT / "docs" / "design.md").read_text()
PACKAGES = ("gateway", "python_backends", "contract", "operations", "speechstream", "model_repository", "perf", "tests")
NAMED = re.compile(rf"\b((?:{'|'.join(PACKAGES)})/[\w/]*\w\.py)\b")


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def _gateway_modules() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / "gateway").rglob("*.py") if p.name != "__init__.py"}


def test_every_module_the_design_names_exists():
    missing = sorted({path for path in NAMED.findall(DESIGN) if not (ROOT / path).is_file()})
    assert missing == []


def _on_the_map() -> set[str]:
    """The gateway modules the map names: by their path, or as `name.py` in the bullet of
    their folder (`- `gateway/edge/`: ... `guard.py` ...`)."""
    section = _section(DESIGN, "## Processes and packages")
    named = set(NAMED.findall(section))
    for bullet in re.split(r"\n\s*- ", section):
        if folder := re.match(r"`(gateway/\w+/)`", bullet):
            named |= {folder[1] + name for name in re.findall(r"`(\w+\.py)`", bullet)}
    return named


def test_every_gateway_module_is_on_the_map():
    assert sorted(_gateway_modules() - _on_the_map()) == []


def test_the_layers_contracts_cover_every_gateway_module():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layered: dict[str, set[str]] = {}
    for contract in contracts:
        if contract["type"] == "layers":
            for container in contract.get("containers", []):
                layered[container] = {m.strip() for layer in contract["layers"] for m in layer.split("|")}
    uncovered = []
    for path in sorted(_gateway_modules()) + [p.relative_to(ROOT).parent.as_posix() + ".py"
                                               for p in (ROOT / "gateway").glob("*/__init__.py")]:
        container, _, module = path.removesuffix(".py").replace("/", ".").rpartition(".")
        if module not in layered.get(container, ()):
            uncovered.append(path)
    assert uncovered == []
