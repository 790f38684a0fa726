"""docs/architecture.md names every module of the package, where it lives: a new module is
written down where the next engineer looks for it, or this test says which is missing."""

from __future__ import annotations

from pathlib import Path

import dynaval

SRC = Path(dynaval.__file__).parent
DOC = SRC.parents[1] / "docs" / "architecture.md"
LAYERS = ("domain", "service_layer", "adapters", "entrypoints")


def test_every_module_of_the_layers_is_named_in_the_architecture() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = []
    for layer in LAYERS:
        for path in sorted((SRC / layer).rglob("*.py")):
            if path.name == "__init__.py" or path.name == "__main__.py":
                continue
            relative = path.relative_to(SRC / layer)
            # Named as `room/module.py` under its room, or as `module.py` in its room's line.
            if f"`{relative.as_posix()}`" not in text and f"`{path.name}`" not in text:
                missing.append(f"{layer}/{relative.as_posix()}")
    assert not missing, f"docs/architecture.md does not name: {', '.join(missing)}"
