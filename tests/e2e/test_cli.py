"""The ``dynaval`` console command, run as a real subprocess with ``DYNAVAL_*`` settings.

Every failure must be one line on stderr (``dynaval: ...``) with a non-zero exit status, never a
traceback (docs/cli.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from dynaval.domain.provenance import pseudonym
from tests.fixtures.service import (
    LEAD_TOKEN,
    PSEUDONYM_SECRET,
    SIGNING_SECRET,
    WEBHOOK_SECRET,
    WRITER_TOKEN,
    LiveService,
    free_port,
)
from tests.support.label_studio_server import Annotator, LabelStudioServer
from tests.support.waiting import wait_for

SECRET_VARIABLES = (
    "DYNAVAL_WEBHOOK_SECRET",
    "DYNAVAL_PSEUDONYM_SECRET",
    "DYNAVAL_SIGNING_SECRET",
    "DYNAVAL_WRITER_TOKENS",
    "DYNAVAL_LEAD_TOKENS",
)
GOOD_SECRETS = {
    "DYNAVAL_WEBHOOK_SECRET": WEBHOOK_SECRET,
    "DYNAVAL_PSEUDONYM_SECRET": PSEUDONYM_SECRET,
    "DYNAVAL_SIGNING_SECRET": SIGNING_SECRET,
    "DYNAVAL_WRITER_TOKENS": WRITER_TOKEN,
    "DYNAVAL_LEAD_TOKENS": LEAD_TOKEN,
}


def dynaval_command() -> list[str]:
    """The installed console script next to this interpreter (``.venv/bin/dynaval``)."""
    script = Path(sys.executable).with_name("dynaval")
    if script.is_file():
        return [str(script)]
    return [
        sys.executable,
        "-m",
        "dynaval.entrypoints.cli",
    ]  # pragma: no cover - not installed as a script


def clean_environment(**values: str) -> dict[str, str]:
    """The caller's environment without any DYNAVAL_* variable, plus ``values``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAVAL_")}
    env.update(values)
    return env


def run_dynaval(
    *args: str, env: dict[str, str], cwd: Path, timeout_s: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*dynaval_command(), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def assert_one_line_error(done: subprocess.CompletedProcess[str], *, status: int = 2) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("dynaval: "), done.stderr
    assert done.returncode == status, done.stderr
    return lines[0]


# ------------------------------------------------------------------------------ without a server


def test_help_lists_the_commands(tmp_path: Path) -> None:
    done = run_dynaval("--help", env=clean_environment(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: dynaval")
    for command in ("serve", "migrate", "model", "sync", "export"):
        assert command in done.stdout
    for subcommand in (
        ["sync", "--help"],
        ["export", "--help"],
        ["model", "build-default", "--help"],
        ["model", "train", "--help"],
    ):
        sub = run_dynaval(*subcommand, env=clean_environment(), cwd=tmp_path)
        assert sub.returncode == 0, sub.stderr
        assert "--round" in sub.stdout or "--out" in sub.stdout


def test_no_command_is_a_usage_error(tmp_path: Path) -> None:
    done = run_dynaval(env=clean_environment(), cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "usage: dynaval" in done.stderr


def unknown_round_environment(tmp_path: Path) -> dict[str, str]:
    return clean_environment(
        DYNAVAL_DATA_DIR=str(tmp_path / "data"),
        DYNAVAL_LABEL_STUDIO_URL=f"http://127.0.0.1:{free_port()}",
        **GOOD_SECRETS,
    )


def test_export_of_an_unknown_round_is_one_line_naming_round_id(tmp_path: Path) -> None:
    out = tmp_path / "round.jsonl"
    done = run_dynaval(
        "export", "--round", "4711", "--out", str(out), env=unknown_round_environment(tmp_path), cwd=tmp_path
    )
    line = assert_one_line_error(done)
    assert "round_id" in line and "4711" in line
    assert done.stdout == ""
    assert not out.exists()  # nothing written for a round that does not exist


@pytest.fixture(scope="module")
def sync_of_an_unknown_round(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One run, looked at by the two tests below."""
    folder = tmp_path_factory.mktemp("sync-unknown-round")
    return run_dynaval("sync", "--round", "4711", env=unknown_round_environment(folder), cwd=folder)


def test_sync_of_an_unknown_round_fails_naming_round_id(
    sync_of_an_unknown_round: subprocess.CompletedProcess[str],
) -> None:
    done = sync_of_an_unknown_round
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("dynaval: ") and "round_id" in last and "4711" in last


def test_sync_of_an_unknown_round_is_one_line(
    sync_of_an_unknown_round: subprocess.CompletedProcess[str],
) -> None:
    assert_one_line_error(sync_of_an_unknown_round)


def test_export_format_csv_is_refused_by_argparse(tmp_path: Path) -> None:
    env = clean_environment(DYNAVAL_DATA_DIR=str(tmp_path / "data"), **GOOD_SECRETS)
    out = tmp_path / "round.csv"
    done = run_dynaval("export", "--round", "1", "--format", "csv", "--out", str(out), env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "--format" in done.stderr and "invalid choice: 'csv'" in done.stderr
    assert not out.exists() and not (tmp_path / "data").exists()  # refused before anything ran


PLACEHOLDERS = {
    **GOOD_SECRETS,
    "DYNAVAL_WEBHOOK_SECRET": "changeme",
    "DYNAVAL_SIGNING_SECRET": "short",
    "DYNAVAL_LEAD_TOKENS": f"{LEAD_TOKEN},secret",
}


# Each case starts a real process (a few seconds of imports), so the cases are spread over the commands.
@pytest.mark.parametrize(
    ("given", "named", "command"),
    [
        pytest.param({}, SECRET_VARIABLES, ["migrate"], id="missing-migrate"),
        pytest.param({}, SECRET_VARIABLES, ["export", "--round", "1", "--out", "x"], id="missing-export"),
        pytest.param(
            PLACEHOLDERS,
            ("DYNAVAL_WEBHOOK_SECRET", "DYNAVAL_SIGNING_SECRET", "DYNAVAL_LEAD_TOKENS"),
            ["sync", "--round", "1"],
            id="placeholders-sync",
        ),
    ],
)
def test_missing_or_placeholder_secrets_name_the_variables(
    given: dict[str, str], named: tuple[str, ...], command: list[str], tmp_path: Path
) -> None:
    env = clean_environment(DYNAVAL_DATA_DIR=str(tmp_path / "data"), **given)
    done = run_dynaval(*command, env=env, cwd=tmp_path)
    line = assert_one_line_error(done)
    for variable in SECRET_VARIABLES:
        assert (variable in line) is (variable in named), line
    assert "DYNAVAL_DEVELOPMENT" in line
    for value in given.values():
        if len(value) >= 16:
            assert value not in line  # the message names variables, never the secrets set
    assert not (tmp_path / "data").exists()  # refused before the database was touched


def test_development_mode_accepts_placeholder_secrets(tmp_path: Path) -> None:
    env = clean_environment(DYNAVAL_DATA_DIR=str(tmp_path / "data"), DYNAVAL_DEVELOPMENT="true")
    done = run_dynaval("migrate", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "newest schema" in done.stdout
    assert (tmp_path / "data" / "dynaval.sqlite3").is_file()


def test_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    env = clean_environment(
        DYNAVAL_DATABASE_URL=f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/dynaval",
        **GOOD_SECRETS,
    )
    done = run_dynaval("migrate", env=env, cwd=tmp_path)
    line = assert_one_line_error(done)
    assert "the database could not be used (OperationalError)" in line
    assert "DYNAVAL_DATABASE_URL" in line


def test_build_default_into_an_existing_folder_without_force_does_nothing(tmp_path: Path) -> None:
    existing = tmp_path / "model"
    existing.mkdir()
    (existing / "config.json").write_text("{}", encoding="utf-8")
    before = sorted(p.name for p in existing.iterdir())
    # No secrets are set: building the model uses none.
    done = run_dynaval(
        "model", "build-default", "--out", str(existing), env=clean_environment(), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "already built" in done.stdout and str(existing) in done.stdout
    assert "--force" in done.stdout
    assert sorted(p.name for p in existing.iterdir()) == before
    assert (existing / "config.json").read_text(encoding="utf-8") == "{}"

    # The NLI model's default folder is the sentiment one's sibling, nli-default.
    nli_default = tmp_path / "data" / "models" / "nli-default"
    nli_default.mkdir(parents=True)
    done = run_dynaval(
        "model",
        "build-default",
        "--task",
        "nli",
        env=clean_environment(DYNAVAL_DATA_DIR=str(tmp_path / "data")),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert f"the default nli model is already built in {nli_default}" in done.stdout
    assert list(nli_default.iterdir()) == []


def test_build_default_for_an_unknown_task_names_the_known_ones(tmp_path: Path) -> None:
    done = run_dynaval(
        "model",
        "build-default",
        "--task",
        "nil",
        env=clean_environment(DYNAVAL_DATA_DIR=str(tmp_path / "data")),
        cwd=tmp_path,
    )
    line = assert_one_line_error(done)
    assert line == "dynaval: no default model for task 'nil'; known tasks: digits, nli, sentiment"
    assert done.stdout == ""
    assert not (tmp_path / "data").exists()


# --------------------------------------------------------------------- against a live round


@pytest.mark.labelstudio
def test_sync_reconciles_votes_whose_webhooks_were_lost(
    live_service: LiveService,
    label_studio_server: LabelStudioServer,
    label_studio_annotators: list[Annotator],
    tmp_path: Path,
) -> None:
    created = live_service.call(
        "POST", "/api/rounds", json={"name": "cli sync round", "task": "sentiment", "model": "default"}
    )
    assert created.status_code == 201, created.text
    round_id = created.json()["id"]
    submitted = live_service.call(
        "POST",
        f"/api/rounds/{round_id}/candidates",
        token=WRITER_TOKEN,
        json={"text": "The soup was wonderful.", "writer_label": "positive"},
    )
    assert submitted.status_code == 201, submitted.text
    candidate_id = submitted.json()["id"]

    def candidate() -> dict[str, Any]:
        body: dict[str, Any] = live_service.call("GET", f"/api/candidates/{candidate_id}").json()
        return body

    wait_for(
        "the candidate in Label Studio", lambda: candidate()["status"] == "in_validation", timeout_s=30.0
    )
    task_id = candidate()["label_studio_task_id"]

    # The votes happen while the service is not listening: their webhooks are lost.
    voters = label_studio_annotators[:2]
    live_service.stop_listening()
    try:
        for annotator in voters:
            label_studio_server.annotate(task_id, annotator.id, "positive")
    finally:
        live_service.start_listening()
    assert candidate()["votes"] == [] and candidate()["status"] == "in_validation"

    env = clean_environment(
        DYNAVAL_DATABASE_URL=live_service.services.settings.resolved_database_url,
        DYNAVAL_DATA_DIR=str(tmp_path / "cli-data"),
        DYNAVAL_LABEL_STUDIO_URL=label_studio_server.url,
        DYNAVAL_LABEL_STUDIO_API_KEY=label_studio_server.api_key,
        DYNAVAL_PUBLIC_URL=live_service.url,
        **GOOD_SECRETS,
    )
    done = run_dynaval("sync", "--round", str(round_id), env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # stdout is the report alone: the progress bar is on stderr
    assert report["round_id"] == round_id
    assert report["added_or_updated"] >= 1
    assert report["added_or_updated"] == 2 and report["annotations_seen"] == 2
    assert report["tasks"] == 1 and report["decisions_changed"] == 1
    assert f"reconciling round {round_id}" in done.stderr
    assert "Traceback" not in done.stderr

    body = candidate()
    assert body["status"] == "accepted"
    assert sorted(v["annotator"] for v in body["votes"]) == sorted(
        pseudonym(PSEUDONYM_SECRET, "annotator", str(a.id)) for a in voters
    )
    assert {v["label"] for v in body["votes"]} == {"positive"}

    # A second sync finds nothing to change.
    again = run_dynaval("sync", "--round", str(round_id), env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["added_or_updated"] == 0

    # Label Studio unreachable: one line, no traceback, and the stored votes stay.
    down = {**env, "DYNAVAL_LABEL_STUDIO_URL": f"http://127.0.0.1:{free_port()}"}
    failed = run_dynaval("sync", "--round", str(round_id), env=down, cwd=tmp_path)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    # The error is the last line; the progress bar comes first (test_sync_of_an_unknown_round_is_one_line).
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("dynaval: ") and "Label Studio" in last
    assert len(candidate()["votes"]) == 2


# ------------------------------------------------------------------------------------- gold add


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        pytest.param(
            [
                '{"text": "Fine gold.", "label": "positive"}',
                "",
                '{"text": "' + "x" * 21 + '", "label": "neutral"}',
            ],
            "gold.jsonl:3: text must be at most 20 characters",
            id="text-over-the-configured-limit",
        ),
        pytest.param(
            ['{"text": "Fine gold.", "label": "positive"}', '{"text": "Odd gold."}'],
            "gold.jsonl:2: label is required",
            id="no-label",
        ),
        pytest.param(
            ['{"text": "\\u200b ", "label": "positive"}'],
            "gold.jsonl:1: text must not be empty",
            id="invisible-text",
        ),
    ],
)
def test_gold_add_checks_each_line_with_the_apis_model_before_touching_the_database(
    lines: list[str], says: str, tmp_path: Path
) -> None:
    (tmp_path / "gold.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = clean_environment(
        DYNAVAL_DATA_DIR=str(tmp_path / "data"), DYNAVAL_MAX_TEXT_CHARS="20", **GOOD_SECRETS
    )
    done = run_dynaval("gold", "add", "--round", "1", "gold.jsonl", env=env, cwd=tmp_path)
    line = assert_one_line_error(done)
    assert line.startswith(f"dynaval: {says}"), line
    assert not (tmp_path / "data").exists()  # refused before the database was touched


@pytest.mark.labelstudio
def test_gold_add_stores_a_files_items_all_or_none(live_service: LiveService, tmp_path: Path) -> None:
    created = live_service.call("POST", "/api/rounds", json={"name": "cli gold round", "task": "sentiment"})
    assert created.status_code == 201, created.text
    round_id = created.json()["id"]
    env = clean_environment(
        DYNAVAL_DATABASE_URL=live_service.services.settings.resolved_database_url,
        DYNAVAL_DATA_DIR=str(tmp_path / "cli-data"),
        DYNAVAL_LABEL_STUDIO_URL=f"http://127.0.0.1:{free_port()}",  # adding gold needs no Label Studio
        **GOOD_SECRETS,
    )

    def stored() -> list[str]:
        with live_service.services.database.engine.connect() as connection:
            rows = connection.execute(
                text('SELECT inputs FROM "gold_item" WHERE round_id = :r ORDER BY id'), {"r": round_id}
            ).scalars()
            return sorted((r if isinstance(r, dict) else json.loads(r))["text"] for r in rows)

    gold = tmp_path / "gold.jsonl"
    # The round's labels are the use case's to check: the error still names the line.
    gold.write_text(
        '{"text": "Lovely.", "label": "positive"}\n{"text": "Meh.", "label": "joyful"}\n', encoding="utf-8"
    )
    line = assert_one_line_error(run_dynaval("gold", "add", "--round", str(round_id), str(gold), env=env,
                                             cwd=tmp_path))  # fmt: skip
    assert line.startswith(f"dynaval: {gold}:2: label must be one of: positive, negative, neutral"), line
    assert stored() == []

    gold.write_text(
        '{"text": "Lovely.", "label": "positive"}\n\n{"text": "Cre\\u0300me, awful.", "label": "negative"}\n',
        encoding="utf-8",
    )
    done = run_dynaval("gold", "add", "--round", str(round_id), str(gold), env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"added 2 gold items to round {round_id}"
    assert stored() == ["Crème, awful.", "Lovely."]
