"""The domain and the use cases reach the file system only through ports: a ``Path`` there is a
name, never something asked of the disk. Import rules cannot see a method call on a ``Path``, so
this test reads the code: a call of a file-system method, or of ``open``, is named with its line."""

from __future__ import annotations

import ast
from pathlib import Path

import dynaval

SRC = Path(dynaval.__file__).parent
INNER_LAYERS = ("domain", "service_layer")
FILE_SYSTEM_METHODS = frozenset(
    {
        "chmod", "exists", "glob", "is_dir", "is_file", "iterdir", "mkdir", "read_bytes", "read_text",
        "rename", "replace", "resolve", "rglob", "rmdir", "stat", "unlink", "write_bytes", "write_text",
    }
)  # fmt: skip
"""``Path`` methods that ask the disk. A port may have a method of the same name (``is_file`` of
the release reader): such a call is on a port, named in PORT_RECEIVERS."""
PORT_RECEIVERS = frozenset({"reader"})
"""Receivers that are ports (their methods are the adapters')."""


def file_system_calls(source: str) -> list[tuple[int, str]]:
    """``(line, call)`` of each file-system call in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        if isinstance(function, ast.Name) and function.id == "open":
            found.append((node.lineno, "open()"))
        elif isinstance(function, ast.Attribute) and function.attr in FILE_SYSTEM_METHODS:
            receiver = function.value
            if isinstance(receiver, ast.Name) and receiver.id in PORT_RECEIVERS:
                continue
            if isinstance(receiver, ast.Attribute) and receiver.attr.endswith("files"):
                continue  # services.release_files, files.release_files: the files port
            if function.attr == "replace" and not _is_path_like(receiver):
                continue  # str.replace, dataclasses' replace
            found.append((node.lineno, f".{function.attr}()"))
    return sorted(found)


def _is_path_like(receiver: ast.expr) -> bool:
    return isinstance(receiver, ast.BinOp) and isinstance(receiver.op, ast.Div)


def test_the_scan_sees_a_path_asked_of_the_disk_and_lets_a_port_or_a_string_be() -> None:
    source = (
        "def f(root, reader, services, text):\n"
        "    (root / 'x').is_file()\n"
        "    open(root)\n"
        "    root.unlink()\n"
        "    reader.is_file(root)\n"
        "    services.release_files.remove(root)\n"
        "    text.replace('a', 'b')\n"
    )
    assert file_system_calls(source) == [(2, ".is_file()"), (3, "open()"), (4, ".unlink()")]


def test_the_domain_and_the_use_cases_touch_no_files() -> None:
    calls = []
    for layer in INNER_LAYERS:
        for path in sorted((SRC / layer).rglob("*.py")):
            for line, call in file_system_calls(path.read_text(encoding="utf-8")):
                calls.append(f"{path.relative_to(SRC).as_posix()}:{line} {call}")
    assert not calls, "file-system calls outside the adapters: " + ", ".join(calls)
