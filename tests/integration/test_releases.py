"""Releases built from frozen rounds in the database (SQLite and PostgreSQL): the files load with
``datasets``, the splits keep their rules, a second release extends the first with sticky writers,
and ``verify`` passes on a release and names each kind of tampering.

The rounds here are seeded straight into the database; ``tests/e2e/test_releases.py`` makes them
through the real Label Studio.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from dynaval.adapters.files.release_files import HashedJsonl, ReleaseFolders, iter_jsonl
from dynaval.bootstrap import offline_services
from dynaval.domain.errors import Conflict, InvalidInput
from dynaval.domain.releases.release import SplitRule, folded_text
from dynaval.entrypoints.cli import main as cli
from dynaval.service_layer.releases.releases import ReleaseRequest, create_release
from dynaval.service_layer.releases.verification import verify_release
from dynaval.service_layer.services import Services
from tests.fixtures.service import cli_environment
from tests.support.release_seed import seed_frozen_round

SENTIMENT = ["positive", "negative", "neutral"]
NLI = ["entailment", "neutral", "contradiction"]


def rows_of(root: Path) -> dict[str, list[dict[str, Any]]]:
    return {
        path.stem: [row for _line, row in iter_jsonl(path)]
        for path in sorted((root / "jsonl").glob("*.jsonl"))
    }


def writers_by_kind(rows: dict[str, list[dict[str, Any]]]) -> dict[str, set[str]]:
    kinds: dict[str, set[str]] = {}
    for split, split_rows in rows.items():
        kinds.setdefault(split.split("_r")[0], set()).update(r["writer"] for r in split_rows)
    return kinds


def release(services: Services, rounds: list[int], version: str, **rule: Any) -> Path:
    made = create_release(
        services,
        ReleaseRequest(round_ids=rounds, version=version, created_by="test lead", rule=SplitRule(**rule)),
    )
    return Path(made.folder)


@pytest.fixture
def round_one(services: Services) -> int:
    assert services.database is not None
    return seed_frozen_round(
        services.database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=120,
        writers=30, rng=random.Random(1), name="round one",
    ).round_id  # fmt: skip


def test_a_release_loads_with_datasets_and_keeps_its_rules(services: Services, round_one: int) -> None:
    import datasets

    root = release(services, [round_one], "1.0.0")
    assert verify_release(root, offline_services()) == []

    loaded = datasets.load_dataset(str(root))
    assert set(loaded) == {"train_r1", "dev_r1", "test_r1"}
    features = loaded["train_r1"].features
    assert features["label"].names == SENTIMENT
    assert "text" in features and "votes" in features and "model_signature" in features
    manifest = json.loads((root / "manifest.json").read_text())
    for split, data in loaded.items():
        assert data.num_rows == manifest["splits"][split]["rows"] > 0
    assert sum(s["rows"] for s in manifest["splits"].values()) + manifest["withheld"]["count"] == 120

    rows = rows_of(root)
    kinds = writers_by_kind(rows)
    assert (
        not kinds["train"] & kinds["dev"]
        and not kinds["train"] & kinds["test"]
        and not kinds["dev"] & kinds["test"]
    )
    texts = {
        kind: {folded_text(r["text"]) for s, rs in rows.items() if s.startswith(kind) for r in rs}
        for kind in kinds
    }
    assert not texts["train"] & texts["test"] and not texts["train"] & texts["dev"]
    for split in ("dev_r1", "test_r1"):
        assert all(r["validators_agreeing"] >= 2 for r in rows[split])
    # Weak examples of dev/test writers are withheld, never put in train.
    assert manifest["withheld"]["count"] > 0
    assert set(manifest["withheld"]["by_reason"]) == {
        "not strongly validated, and its writer is a dev or test writer"
    }
    card = (root / "README.md").read_text()
    assert (
        "class_label" in card
        and "annotations_creators" in card
        and "Never train on a dev or test split" in card
    )


def test_a_second_release_extends_the_first_with_sticky_writers(services: Services, round_one: int) -> None:
    assert services.database is not None
    first = release(services, [round_one], "1.0.0")
    # Round two: the same 30 writers and 15 new ones.
    round_two = seed_frozen_round(
        services.database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=150,
        writers=45, rng=random.Random(2), name="round two", annotation_base=10**6,
    ).round_id  # fmt: skip
    second = release(services, [round_one, round_two], "2.0.0")
    assert verify_release(second, offline_services()) == []
    manifest = json.loads((second / "manifest.json").read_text())
    assert manifest["parent"]["version"] == "1.0.0"
    for split in ("train_r1", "dev_r1", "test_r1"):  # round one's splits, unchanged, byte for byte
        assert (second / "jsonl" / f"{split}.jsonl").read_bytes() == (
            first / "jsonl" / f"{split}.jsonl"
        ).read_bytes()
    one, two = writers_by_kind(rows_of(first)), writers_by_kind(rows_of(second))
    for kind in ("train", "dev", "test"):
        assert one[kind] <= two[kind]
    assert {s for s in manifest["splits"] if s.endswith("_r2")} == {"train_r2", "dev_r2", "test_r2"}

    # The same rounds again under a new version: the same rows, the same content hash.
    third = release(services, [round_one, round_two], "2.0.1")
    assert json.loads((third / "manifest.json").read_text())["content_hash"] == manifest["content_hash"]
    with pytest.raises(Conflict) as refused:
        release(services, [round_one], "1.0.0")
    assert refused.value.field == "version"


def test_a_builds_lines_are_those_it_would_make_from_the_records(
    services: Services, round_one: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build reads the release lines kept with the records: each line it writes is the one
    ``release_row`` makes from the record itself, with an excluded annotator's votes not counted, the
    vote of a writer's own Label Studio account left out, and a text that reads as an image's path
    made from its record. A round whose records are not all kept with a line is built from the
    records, into the same files."""
    from sqlalchemy import text
    from sqlmodel import select

    from dynaval.adapters.db.orm import AnnotatorStatusRow, CandidateRow
    from dynaval.domain.provenance import pseudonym, writer_pseudonym
    from dynaval.domain.releases.rows import canonical_line, release_row
    from dynaval.service_layer.dataset_records import round_dataset
    from dynaval.service_layer.releases import releases
    from tests.support.release_seed import set_inputs

    assert services.database is not None
    with services.database.unit_of_work() as session:
        first, second, third = session.exec(
            select(CandidateRow).where(CandidateRow.status == "accepted").order_by(CandidateRow.submitted_at)
        ).all()[:3]
        writer, second_id, third_id = first.writer_id, second.id, third.id
        session.add(
            AnnotatorStatusRow(
                round_id=round_one, annotator_id="101", excluded=True, decided_by="lead", reason="t"
            )
        )
        session.commit()
    set_inputs(services.database, second_id, {"text": "images/" + "ab" * 32 + ".png"})
    # A line that names only its example (kept where no release row could be made of the record).
    assert round_dataset.kept_release_pages(services, round_one) is not None  # the records written
    with services.database.engine.begin() as connection:
        connection.execute(
            text("UPDATE dataset_record_release SET line = :line WHERE candidate_id = :id"),
            {"line": b'{"example_id":"' + third_id.encode() + b'"}', "id": third_id},
        )
    monkeypatch.setattr(services, "writer_annotators", lambda: {writer: "102"})
    reading: list[Any] = []  # the rounds whose rows were made from their records
    monkeypatch.setattr(
        releases,
        "iter_round_dataset_pages",
        lambda *a: reading.append(a) or round_dataset.iter_round_dataset_pages(*a),
    )

    root = release(services, [round_one], "1.0.0")
    assert not reading
    assert verify_release(root, offline_services()) == []
    written = {
        row["example_id"]: line for path in (root / "jsonl").glob("*.jsonl") for line, row in iter_jsonl(path)
    }
    secret = services.settings.pseudonym_secret
    expected = {}
    for page in round_dataset.built_round_dataset_pages(services, round_one):
        for record in page:
            own = record["writer"] == writer_pseudonym(secret, writer, None)
            expected[record["example_id"]] = canonical_line(
                release_row(
                    record,
                    round_index=1,
                    fields=["text"],
                    excluded_annotators={pseudonym(secret, "annotator", "101")},
                    writer_annotator=pseudonym(secret, "annotator", "102") if own else None,
                )
            )
    assert written and written == {example_id: expected[example_id] for example_id in written}
    rows = [row for split_rows in rows_of(root).values() for row in split_rows]
    assert any(not vote["counted"] for row in rows for vote in row["votes"])
    assert any(row["writer_annotator"] for row in rows)

    # Records kept without their release lines (by an earlier version): built from the records.
    with services.database.engine.begin() as connection:
        connection.execute(
            text("DELETE FROM dataset_record_release WHERE candidate_id = :id"), {"id": second_id}
        )
    assert services.dataset_reads is not None and services.dataset_reads.kept_release_lines(round_one) is None
    again = release(services, [round_one], "1.0.1")  # a child of 1.0.0: its places, the same files
    assert reading
    for path in sorted((root / "jsonl").glob("*.jsonl")):
        assert (again / "jsonl" / path.name).read_bytes() == path.read_bytes()


def test_only_frozen_rounds_of_one_task_are_released(services: Services, round_one: int) -> None:
    assert services.database is not None
    nli_round = seed_frozen_round(
        services.database, task_type="nli", labels=NLI, fields=["premise", "hypothesis"], accepted=5,
        writers=3, rng=random.Random(3), annotation_base=10**6,
    ).round_id  # fmt: skip
    with pytest.raises(InvalidInput) as mixed:
        release(services, [round_one, nli_round], "1.0.0")
    assert mixed.value.field == "rounds"
    with services.database.unit_of_work() as session:
        from sqlalchemy import update

        from dynaval.adapters.db.orm import RoundRow

        session.execute(update(RoundRow).where(RoundRow.id == round_one).values(state="closed"))
        session.commit()
    with pytest.raises(Conflict) as closed:
        release(services, [round_one], "1.0.0")
    assert closed.value.field == "rounds" and "freeze" in closed.value.message
    with pytest.raises(InvalidInput) as bad_version:
        release(services, [nli_round], "one")
    assert bad_version.value.field == "version"
    nothing_accepted = seed_frozen_round(
        services.database, task_type="nli", labels=NLI, fields=["premise", "hypothesis"], accepted=0,
        rejected=4, writers=3, rng=random.Random(5), annotation_base=2 * 10**6,
    ).round_id  # fmt: skip
    with pytest.raises(Conflict) as empty:
        release(services, [nothing_accepted], "1.0.0")
    assert empty.value.field == "rounds" and "nothing to release" in empty.value.message
    assert not list((services.settings.data_dir / "releases").glob("*"))  # nothing was left behind


def test_nli_premises_stay_in_one_split(services: Services) -> None:
    assert services.database is not None
    round_id = seed_frozen_round(
        services.database, task_type="nli", labels=NLI, fields=["premise", "hypothesis"], accepted=200,
        writers=40, rng=random.Random(4), shared_premises=8, weak_share=0.0,
    ).round_id  # fmt: skip
    root = release(services, [round_id], "1.0.0")
    assert verify_release(root, offline_services()) == []
    kinds: dict[str, set[str]] = {}
    for split, rows in rows_of(root).items():
        for row in rows:
            assert row["premise"] and row["hypothesis"]
            kinds.setdefault(folded_text(row["premise"]), set()).add(split.split("_r")[0])
    assert all(len(k) == 1 for k in kinds.values())
    assert len({k for ks in kinds.values() for k in ks}) >= 2  # premises still spread over kinds


def test_verify_names_each_tampering(services: Services, round_one: int, tmp_path: Path) -> None:
    root = release(services, [round_one], "1.0.0")

    byte = tmp_path / "byte"
    shutil.copytree(root, byte)
    shard = next((byte / "data").glob("test_r1-*.parquet"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    findings = verify_release(byte, offline_services())
    assert any(f.startswith(f"file data/{shard.name}: SHA-256") for f in findings), findings

    count = tmp_path / "count"
    shutil.copytree(root, count)
    manifest = json.loads((count / "manifest.json").read_text())
    manifest["splits"]["test_r1"]["rows"] += 1
    (count / "manifest.json").write_text(json.dumps(manifest))
    findings = verify_release(count, offline_services())
    assert any("manifest: splits.test_r1.rows says" in f for f in findings), findings
    assert any(f.startswith("card: ") for f in findings), findings

    # A row moved from test to train, by someone who also rewrote every hash and count.
    moved = tmp_path / "moved"
    shutil.copytree(root, moved)
    test_lines = (moved / "jsonl" / "test_r1.jsonl").read_bytes().splitlines(keepends=True)
    # A row of a writer with another row in test, so the writer ends up in both kinds.
    writers = Counter(json.loads(line)["writer"] for line in test_lines)
    index = next(i for i, line in enumerate(test_lines) if writers[json.loads(line)["writer"]] > 1)
    test_lines.insert(0, test_lines.pop(index))
    (moved / "jsonl" / "test_r1.jsonl").write_bytes(b"".join(test_lines[1:]))
    (moved / "jsonl" / "train_r1.jsonl").write_bytes(
        (moved / "jsonl" / "train_r1.jsonl").read_bytes() + test_lines[0]
    )
    for split in ("test_r1", "train_r1"):
        shard = next((moved / "data").glob(f"{split}-*.parquet"))
        table = pq.read_table(shard)
        ids = [row["example_id"] for _l, row in iter_jsonl(moved / "jsonl" / f"{split}.jsonl")]
        whole = pq.read_table(next((root / "data").glob("test_r1-*.parquet")))
        import pyarrow as pa

        merged = pa.concat_tables([table, whole]).to_pylist()
        by_id = {r["example_id"]: r for r in merged}
        pq.write_table(pa.Table.from_pylist([by_id[i] for i in ids], schema=table.schema), shard)
    findings = verify_release(moved, offline_services())
    assert any(f.startswith("writers: 1 writer is in two split kinds") for f in findings), findings
    assert any("manifest: splits." in f for f in findings), findings


class _CountedReads(ReleaseFolders):
    """The release files, counting how often a JSONL file is read whole."""

    def __init__(self) -> None:
        self.reads: Counter[str] = Counter()

    def iter_rows(self, path: Path) -> Iterator[tuple[bytes, dict[str, Any]]]:
        self.reads[path.name] += 1
        return super().iter_rows(path)

    def hashed_rows(self, path: Path) -> HashedJsonl:
        self.reads[path.name] += 1
        return super().hashed_rows(path)

    def file_sha256(self, path: Path) -> str:
        if path.suffix == ".jsonl":
            self.reads[path.name] += 1
        return super().file_sha256(path)


def test_verify_reads_each_jsonl_file_once_and_names_damaged_files(
    services: Services, round_one: int, tmp_path: Path
) -> None:
    root = release(services, [round_one], "1.0.0")
    counted = _CountedReads()
    files = dataclasses.replace(offline_services(), release_files=counted)
    assert verify_release(root, files) == []
    assert counted.reads == {"train_r1.jsonl": 1, "dev_r1.jsonl": 1, "test_r1.jsonl": 1}

    # A blank line: the same rows, another file.
    blank = tmp_path / "blank"
    shutil.copytree(root, blank)
    jsonl = blank / "jsonl" / "dev_r1.jsonl"
    jsonl.write_bytes(b"\n" + jsonl.read_bytes())
    assert verify_release(blank, offline_services()) == [
        "file jsonl/dev_r1.jsonl: SHA-256 differs from the manifest's"
    ]

    # A malformed line: named as such, and the file as unreadable.
    broken = tmp_path / "broken"
    shutil.copytree(root, broken)
    jsonl = broken / "jsonl" / "test_r1.jsonl"
    jsonl.write_bytes(jsonl.read_bytes() + b"{not json\n")
    findings = verify_release(broken, offline_services())
    assert "file jsonl/test_r1.jsonl: SHA-256 differs from the manifest's" in findings, findings
    assert "file jsonl/test_r1.jsonl: cannot be read (JSONDecodeError)" in findings, findings
    assert any(f.startswith("rows: jsonl/test_r1.jsonl has a malformed row") for f in findings), findings

    # A cut Parquet shard: named, and its rows are not compared.
    cut = tmp_path / "cut"
    shutil.copytree(root, cut)
    shard = next((cut / "data").glob("train_r1-*.parquet"))
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    findings = verify_release(cut, offline_services())
    assert f"rows: data/{shard.name} cannot be read as Parquet (ArrowInvalid)" in findings, findings
    assert f"file data/{shard.name}: cannot be read (ArrowInvalid)" in findings, findings
    assert not any("do not hold the rows" in f for f in findings), findings

    # The rows of a shard in another order, its hashes rewritten: the order is checked.
    turned = tmp_path / "turned"
    shutil.copytree(root, turned)
    shard = next((turned / "data").glob("train_r1-*.parquet"))
    table = pq.read_table(shard)
    pq.write_table(table.take(list(reversed(range(table.num_rows)))), shard)
    manifest = json.loads((turned / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["path"] == f"data/{shard.name}":
            entry["sha256"] = ReleaseFolders().file_sha256(shard)
    (turned / "manifest.json").write_text(json.dumps(manifest))
    findings = verify_release(turned, offline_services())
    assert "rows: the Parquet files of train_r1 do not hold the rows of jsonl/train_r1.jsonl, in order" in (
        findings
    ), findings


def test_the_commands_create_and_verify(
    services: Services,
    round_one: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli_environment(services, monkeypatch)
    out = tmp_path / "out"

    def create(rounds: str, version: str, folder: Path, *extra: str) -> int:
        return cli.main(
            ["release", "create", "--rounds", rounds, "--version", version, "--out", str(folder), *extra]
        )

    assert create(str(round_one), "1.0.0", out, "--license", "cc-by-4.0") == 0
    printed = capsys.readouterr().out
    assert f"release: {out}" in printed and "shares reached" in printed
    assert cli.main(["release", "verify", str(out)]) == 0
    assert "every check passed" in capsys.readouterr().out
    assert "license: cc-by-4.0" in (out / "README.md").read_text()

    assert create("x", "1.0.1", tmp_path / "x") == 2
    assert "--rounds takes round ids" in capsys.readouterr().err
    assert create(str(round_one), "1.0.0", tmp_path / "y") == 2
    assert "exists already" in capsys.readouterr().err
    assert create(str(round_one), "1.0.2", out) == 2
    assert "not an empty folder" in capsys.readouterr().err
    (out / "manifest.json").write_text("{")
    assert cli.main(["release", "verify", str(out)]) == 1
    printed = capsys.readouterr()
    assert "manifest: manifest.json is not valid JSON" in printed.out
    assert f"release {out}: 1 check failed" in printed.err
    assert cli.main(["release", "verify", str(tmp_path / "nowhere")]) == 1
    assert "is not a directory" in capsys.readouterr().out
