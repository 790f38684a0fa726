"""A release: an immutable, versioned set of files built from frozen rounds of one task type.

This module holds the release's rules that need no storage and no files: what a version looks like,
the split rule a release records, how texts are compared across splits, the split names, and the
content hash over the canonical rows. The split assignment itself is
:mod:`dynaval.domain.releases.splits`; the card, :mod:`dynaval.domain.releases.card`; the checks
that ship with the data, :mod:`dynaval.domain.releases.checks`.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from dynaval.domain.errors import InvalidInput

MANIFEST = "manifest.json"
"""A release's manifest, in its folder's root."""
CARD = "README.md"
"""A release's dataset card, in its folder's root."""

RELEASE_FORMAT = 1
"""The layout version of a release directory (``manifest.json``'s ``format``). ``verify`` makes the
card again and hashes the canonical rows again, so a change to the card's wording, to the canonical
row or to the layout is a new format: the code that reads format 1 stays, or every release made
before the change fails ``verify`` under the new version (``tests/data/releases`` holds releases of
each format, and their verification is tested)."""


def format_problem(manifest: Mapping[str, Any]) -> str | None:
    """Why this dynaval cannot check a release of the manifest's format; None when it can."""
    stated = manifest.get("format")
    if isinstance(stated, bool) or not isinstance(stated, int) or stated < 1:
        return f"format is {stated!r}, not a positive whole number: not a dynaval release manifest"
    if stated > RELEASE_FORMAT:
        return (
            f"the release is format {stated}, and this dynaval reads formats up to {RELEASE_FORMAT}:"
            " verify it with a newer dynaval"
        )
    return None


# Matched whole (``fullmatch``): ``$`` would also match before a final newline, and ``\d`` would take
# every script's digits. A version and a name become a folder, a file name and a download header.
_VERSION = re.compile(
    r"(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})(-[0-9A-Za-z][0-9A-Za-z.]{0,30})?"
)
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,79}")


def check_version(version: str) -> str:
    """A semantic version, ``MAJOR.MINOR.PATCH`` with an optional ``-pre`` tag (``1.0.0``, ``2.1.0-rc1``)."""
    if not _VERSION.fullmatch(version):
        raise InvalidInput(
            f"version {version!r} is not a semantic version such as 1.0.0 or 1.1.0-rc1", field="version"
        )
    return version


def check_release_name(name: str) -> str:
    """Lower-case letters, digits, ``-`` and ``_``: a name that is also a folder and a dataset id."""
    if not _NAME.fullmatch(name):
        raise InvalidInput(
            f"name {name!r} must be 1-80 lower-case letters, digits, '-' or '_', "
            "starting with a letter or digit",
            field="name",
        )
    return name


class SplitKind(StrEnum):
    """The three kinds of split; a writer belongs to exactly one, in every round and release."""

    TRAIN = "train"
    DEV = "dev"
    TEST = "test"

    @property
    def code(self) -> int:
        """A small number for the kind (train 0, dev 1, test 2), for columns packed a byte a row."""
        return _SPLIT_KIND_CODES[self]


_SPLIT_KIND_CODES = {kind: code for code, kind in enumerate(SplitKind)}


def split_name(kind: SplitKind, round_index: int) -> str:
    """ANLI's names: ``train_r1``, ``dev_r1``, ``test_r1``, ``train_r2``, ..."""
    return f"{kind.value}_r{round_index}"


@functools.lru_cache(maxsize=1024)
def split_kind_of(name: str) -> SplitKind:
    """The kind of a split's name (``ValueError`` for none); kept for the few names a release has,
    since it is asked of every row."""
    return SplitKind(name.split("_r", 1)[0])


@dataclass(frozen=True)
class SplitRule:
    """How a release assigns examples to splits; recorded in its manifest.

    - ``shares``: target shares of *new* writers (train, dev, test); a writer's examples all go to
      one split kind, kept in every later release (sticky).
    - ``min_agreeing_validators``: dev and test hold only examples at least this many counted
      validators labelled as the writer did (ANLI: 2). A dev or test writer's weaker examples are
      withheld (training on them would put the writer in two splits).
    - ``balance_dev_test``: DynaSent's balance of dev and test by gold label x model prediction:
      each cell of a dev or test split keeps as many examples as its smallest cell; the rest are
      withheld.
    - ``seed``: the seed of the grouped, stratified assignment of new writers.
    """

    shares: tuple[float, float, float] = (0.8, 0.1, 0.1)
    min_agreeing_validators: int = 2
    balance_dev_test: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if len(self.shares) != 3 or any(not 0 <= s <= 1 for s in self.shares):
            raise InvalidInput(
                "split shares are three numbers between 0 and 1 (train, dev, test)", field="shares"
            )
        if abs(sum(self.shares) - 1) > 1e-9:
            raise InvalidInput(f"split shares must add up to 1, not {sum(self.shares):g}", field="shares")
        if self.shares[0] == 0:
            raise InvalidInput("the train share must be above 0", field="shares")
        if not 0 <= self.min_agreeing_validators <= 50:
            raise InvalidInput(
                "min_agreeing_validators must be between 0 and 50", field="min_agreeing_validators"
            )
        if not 0 <= self.seed < 2**32:
            raise InvalidInput("seed must be between 0 and 4294967295", field="seed")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["shares"] = {"train": self.shares[0], "dev": self.shares[1], "test": self.shares[2]}
        data["writer_disjoint"] = True
        data["sticky"] = True
        data["text_disjoint"] = "NFKC, case-folded, whitespace-folded inputs; and the first input field"
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SplitRule:
        shares = data.get("shares", {"train": 0.8, "dev": 0.1, "test": 0.1})
        return cls(
            shares=(float(shares["train"]), float(shares["dev"]), float(shares["test"])),
            min_agreeing_validators=int(data.get("min_agreeing_validators", 2)),
            balance_dev_test=bool(data.get("balance_dev_test", False)),
            seed=int(data.get("seed", 0)),
        )


def folded_text(text: str) -> str:
    """A text as splits compare it: NFKC, case-folded, runs of whitespace as one space, stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def text_keys(inputs: Mapping[str, str | None], fields: Sequence[str]) -> tuple[str, ...]:
    """What may not appear in two splits: the example's whole input (its fields, folded, in order)
    and, for a task with several fields, its first field alone (an NLI premise: a premise's
    examples stay together, so no premise is in two splits)."""
    return tuple(digest.hex() for digest in text_key_digests(inputs, fields))


TEXT_KEY_BYTES = 12
"""A text key's digest: 96 bits."""


def text_key_digests(inputs: Mapping[str, str | None], fields: Sequence[str]) -> tuple[bytes, ...]:
    """:func:`text_keys` as their digests' bytes (``TEXT_KEY_BYTES`` each), to be packed."""
    values = [folded_text(inputs.get(field) or "") for field in fields]
    keys = ["all\x1f" + "\x1f".join(values)]
    if len(fields) > 1:
        keys.append(f"{fields[0]}\x1f{values[0]}")
    # Kept as 96-bit digests: a million examples' keys fit in tens of megabytes, not in gigabytes.
    return tuple(hashlib.blake2b(key.encode(), digest_size=TEXT_KEY_BYTES).digest() for key in keys)


def row_digest(canonical_line: bytes) -> bytes:
    """SHA-256 of one canonical row (its JSONL line, without the newline)."""
    return hashlib.sha256(canonical_line).digest()


def content_hash(digests_by_id: Iterable[tuple[str, bytes]]) -> str:
    """The release's content hash: SHA-256 over the rows' SHA-256 digests, concatenated in
    example-id order (so two builds of the same data hash the same, whatever order they wrote in)."""
    return content_hash_in_order(digest for _id, digest in sorted(digests_by_id))


def content_hash_in_order(digests: Iterable[bytes | memoryview]) -> str:
    """:func:`content_hash` of rows' digests given in example-id order already (ids unique): no
    tuple made a row, nor a second sort."""
    whole = hashlib.sha256()
    for digest in digests:
        whole.update(digest)
    return "sha256:" + whole.hexdigest()


@dataclass
class Release:
    """A release the service made and keeps: immutable once stored."""

    name: str
    version: str
    task_type: str
    round_ids: list[int]
    manifest: dict[str, Any]
    content_hash: str
    folder: str
    """Where the service keeps its files."""
    created_by: str
    parent_id: int | None = None
    id: int | None = None
    created_at: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "version": self.version,
            "task": self.task_type,
            "rounds": list(self.round_ids),
            "parent_id": self.parent_id,
            "content_hash": self.content_hash,
            "created_by": self.created_by,
            "created_at": self.created_at.isoformat() if self.created_at is not None else None,
            "manifest": self.manifest,
        }
