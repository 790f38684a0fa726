"""The deployed service's gunicorn control socket: none unless DYNAVAL_CONTROL_SOCKET names a path,
so two services started by one user never share gunicorn's per-user default
($HOME/.gunicorn/gunicorn.ctl)."""

from __future__ import annotations

import stat
from pathlib import Path

from tests.fixtures.service import deployed_environment, free_port
from tests.support.gunicorn_service import GunicornService


def service_env(folder: Path, port: int, **extra: str) -> dict[str, str]:
    # HOME: where gunicorn's default socket would go; XDG_RUNTIME_DIR, which it would prefer.
    env = deployed_environment(folder, port, HOME=str(folder / "home"), **extra)
    env.pop("XDG_RUNTIME_DIR", None)
    return env


def test_two_services_open_no_control_socket_unless_one_is_named(tmp_path: Path) -> None:
    named = tmp_path / "sockets" / "dynaval-b.ctl"
    first_port, second_port = free_port(), free_port()
    first = service_env(tmp_path / "a", first_port)
    second = service_env(tmp_path / "b", second_port, DYNAVAL_CONTROL_SOCKET=str(named))
    (tmp_path / "a" / "home").mkdir(parents=True)
    (tmp_path / "b" / "home").mkdir(parents=True)
    with (
        GunicornService(first, first_port, tmp_path / "a.log") as a,
        GunicornService(second, second_port, tmp_path / "b.log") as b,
    ):
        assert not (tmp_path / "a" / "home" / ".gunicorn").exists(), a.log_tail()
        assert not (tmp_path / "b" / "home" / ".gunicorn").exists(), b.log_tail()
        assert stat.S_ISSOCK(named.stat().st_mode), b.log_tail()
        assert f"Control socket listening at {named}" in b.log_tail(200)
        assert "Control socket" not in a.log_tail(200)
