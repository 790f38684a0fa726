"""Every example written in a docstring of the package runs, and gives what it shows.

The modules are found by their text (a ``>>>`` line), so an example added anywhere is run without
anyone listing it here; each module found must run at least one example (a ``>>>`` the doctest
parser does not see, in a raw string or an indented block, would otherwise pass unseen).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import dynaval

SRC = Path(dynaval.__file__).parent


def modules_with_examples() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(dynaval.__path__, "dynaval."):
        if ".migrations" in info.name:
            continue
        path = SRC.joinpath(*info.name.split(".")[1:])
        source = path / "__init__.py" if info.ispkg else path.with_suffix(".py")
        if ">>> " in source.read_text(encoding="utf-8"):
            names.append(info.name)
    return names


def test_the_examples_are_found_where_they_are_written() -> None:
    found = set(modules_with_examples())
    assert {
        "dynaval.domain.agreement.report",
        "dynaval.domain.agreement.incremental",
        "dynaval.domain.agreement.nominal",
        "dynaval.domain.regression.suite",
        "dynaval.domain.regression.gate",
        "dynaval.domain.regression.revalidation",
    } <= found


@pytest.mark.parametrize("name", modules_with_examples())
def test_the_docstring_examples_run_and_hold(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has a >>> line that no example runs"
    assert result.failed == 0
