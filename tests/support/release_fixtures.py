"""Makes the releases kept in ``tests/data/releases/format-<N>/``: small releases of seeded frozen
rounds, built by the dynaval of the day and then kept as they are, so that later versions are tested
against what an earlier one wrote (``tests/integration/test_release_formats.py``).

Run it only when a new release format is made, into that format's new folder::

    python -m tests.support.release_fixtures tests/data/releases/format-2

Never into an existing folder: those releases stand for what researchers already hold.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
from pathlib import Path

from dynaval.bootstrap import bootstrap
from dynaval.domain.releases.release import RELEASE_FORMAT, SplitRule
from dynaval.service_layer.releases.releases import ReleaseRequest, create_release
from tests.fixtures.service import make_settings
from tests.support.release_seed import seed_frozen_round

SENTIMENT = ["positive", "negative", "neutral"]
NLI = ["entailment", "neutral", "contradiction"]


def make(out: Path) -> None:
    if out.exists():
        raise SystemExit(f"{out} exists: the releases of a format are made once and kept")
    with tempfile.TemporaryDirectory() as work:
        settings = make_settings(
            database_url=f"sqlite:///{work}/dynaval.db",
            data_dir=Path(work),
            label_studio_url="http://127.0.0.1:9",
            label_studio_api_key="unused",
            public_url="http://127.0.0.1:9",
            model_dir=Path(work),
        )
        services = bootstrap(settings)
        try:
            database = services.database
            assert database is not None
            made: dict[str, str] = {}
            first = seed_frozen_round(
                database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=40,
                writers=12, rng=random.Random(7), name="sentiment round one",
            ).round_id  # fmt: skip
            second = seed_frozen_round(
                database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=30,
                writers=10, rng=random.Random(8), name="sentiment round two", writer_prefix="second",
                annotation_base=10_000,
            ).round_id  # fmt: skip
            nli = seed_frozen_round(
                database, task_type="nli", labels=NLI, fields=["premise", "hypothesis"], accepted=40,
                writers=12, rng=random.Random(9), shared_premises=8, name="nli round one",
                writer_prefix="nli", annotation_base=20_000,
            ).round_id  # fmt: skip
            for key, rounds, version in (
                ("sentiment-1.0.0", [first], "1.0.0"),
                ("sentiment-1.1.0", [first, second], "1.1.0"),
                ("nli-1.0.0", [nli], "1.0.0"),
            ):
                release = create_release(
                    services,
                    ReleaseRequest(
                        round_ids=rounds,
                        version=version,
                        created_by="fixture lead",
                        rule=SplitRule(seed=11),
                        name=key.rsplit("-", 1)[0],
                    ),
                )
                made[key] = release.folder
        finally:
            services.close()
        out.mkdir(parents=True)
        for key, folder in made.items():
            shutil.copytree(folder, out / key)
    print(f"format {RELEASE_FORMAT}: {', '.join(sorted(made))} in {out}")


if __name__ == "__main__":
    make(Path(sys.argv[1]))
