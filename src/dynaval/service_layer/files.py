"""Files, as the use cases of every room that reads or writes them see them: a release's folder
(the releases room writes it; the health and regression rooms read releases too), and the commands'
light services for work on files alone. The adapter is
:class:`~dynaval.adapters.files.release_files.ReleaseFolders` (JSONL, Parquet in the Hugging Face
layout, the manifest and the card); what the files hold, row by row, is the domain's
(:mod:`dynaval.domain.releases`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from dynaval.domain.health.near_duplicates import NearDuplicateRule
from dynaval.service_layer.health.ports import CorpusFiles, Encoder, ReleaseIndex
from dynaval.service_layer.images.ports import ImageCodec


class ReleaseUnreadable(Exception):
    """The directory is not a release (no or a broken manifest); the message says which."""


@dataclass(frozen=True)
class WrittenFile:
    path: str
    split: str
    rows: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "split": self.split, "rows": self.rows, "sha256": self.sha256}


class RowSink(Protocol):
    """A file of lines being written beside the caller."""

    def add(self, line: bytes) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...


class SplitFiles(Protocol):
    """The rows of a release being written into its folder: each split's JSONL and Parquet files."""

    def add(self, split: str, line: bytes) -> None:
        """One canonical row (its JSONL line, without the newline) into ``split``."""

    def close(self) -> list[WrittenFile]: ...

    def image_files(self) -> list[WrittenFile]:
        """Once closed: the images written into the release's ``images/`` folder, each once."""

    def abort(self) -> None: ...


class ReleaseStaging(Protocol):
    """A release being built: a scratch folder of its own, and its folder moved into place once whole,
    so that a release's folder is either whole or absent."""

    @property
    def scratch(self) -> Path:
        """A new, empty folder for the build's own files."""

    @property
    def out(self) -> Path:
        """Where the release's folder is built (inside :attr:`scratch`; not created yet)."""

    def publish(self) -> Path:
        """Move :attr:`out` into its place in the releases folder; ``Conflict`` naming ``version``
        when a folder of that name is there already."""

    def clean_up(self) -> None:
        """Remove the scratch folder, whatever is left in it."""

    def withdraw(self) -> None:
        """Remove the published folder (its release could not be stored)."""


class HashedRows(Protocol):
    """The lines of a JSONL file and their rows, the file read once: once every row has been
    iterated, its SHA-256 and its number of rows (a row a non-empty line) are known too."""

    sha256: str | None
    """The file's SHA-256, hex; None until every row has been iterated."""
    rows: int
    """The rows iterated so far."""

    def __iter__(self) -> Iterator[tuple[bytes, dict[str, Any]]]: ...


class ReleaseReader(Protocol):
    """Reading a release folder, wherever it came from."""

    def read_manifest(self, root: Path) -> dict[str, Any]:
        """The folder's manifest; :class:`ReleaseUnreadable` when there is none to read."""

    def iter_rows(self, path: Path) -> Iterator[tuple[bytes, dict[str, Any]]]:
        """Each line of a JSONL file (without its newline) and its row."""

    def hashed_rows(self, path: Path) -> HashedRows:
        """Each line of a JSONL file and its row (as :meth:`iter_rows`), and the file's SHA-256 and
        number of rows from the same read."""

    def file_sha256(self, path: Path) -> str: ...

    def parquet_column_batches(self, path: Path, columns: Sequence[str]) -> Iterator[list[list[Any]]]:
        """A Parquet file's ``columns``, a batch of rows at a time: each batch's values, a list a
        column (a shard of 250,000 ids read at once would be 35 MB of strings for a moment)."""

    def parquet_rows(self, path: Path) -> int: ...

    def is_file(self, path: Path) -> bool: ...

    def read_bytes(self, path: Path) -> bytes:
        """A file's bytes (an image of the release)."""

    def file_names(self, folder: Path) -> list[str]:
        """The names in ``folder``, sorted; none when it is not a folder."""

    def holds_release(self, root: Path) -> bool:
        """Whether the folder holds a release's manifest."""

    def read_card(self, root: Path) -> str | None:
        """The card the folder holds (undecodable bytes replaced); None when it holds none."""


class ReleaseFiles(ReleaseReader, Protocol):
    """Reading a release folder, and writing one."""

    def stage(self, store: Path, name: str) -> ReleaseStaging:
        """A new build of the release folder ``name`` in the releases folder ``store``."""

    def scratch_rows(self, path: Path) -> RowSink:
        """A new file of lines at ``path``, written on a thread beside the caller."""

    def iter_lines(self, path: Path) -> Iterator[bytes]:
        """Each line of a file :meth:`scratch_rows` wrote, without its newline, as it was added."""

    def remove(self, path: Path) -> None:
        """Remove a scratch file (one :meth:`scratch_rows` wrote)."""

    def split_files(
        self,
        root: Path,
        *,
        fields: Sequence[str],
        labels: Sequence[str],
        split_rows: Mapping[str, int],
        image_fields: Sequence[str] = (),
        image_bytes: Callable[[str], bytes] | None = None,
    ) -> SplitFiles:
        """The writer of a release's rows into ``root`` (which must not exist yet). An image field's
        rows hold the image's path in the release (``images/<sha256>.png``); its bytes come from
        ``image_bytes`` (a SHA-256's PNG) into the Parquet files and the ``images/`` folder."""

    def features(
        self, fields: Sequence[str], labels: Sequence[str], image_fields: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        """The rows' features as the card's YAML header lists them (Hugging Face ``datasets``)."""

    def write_manifest(self, root: Path, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Write the manifest; the manifest as stored (its keys sorted), which the card is made from."""

    def write_card(self, root: Path, text: str) -> None: ...

    def archive(self, root: Path, prefix: str) -> Iterator[bytes]:
        """The folder as one uncompressed tar (under ``prefix/``), a piece at a time."""

    def check_copy_target(self, out: Path) -> None:
        """``out`` may receive a copy of a release: it does not exist, or it is an empty folder
        (``InvalidInput`` naming ``out`` otherwise)."""

    def copy(self, root: Path, out: Path) -> Path:
        """Copy the folder's files to ``out`` (see :meth:`check_copy_target`)."""


class FileServices(Protocol):
    """What the use cases on release files and corpora need: the files, the sentence encoder (for
    the semantic checks; it raises ``InvalidInput`` or ``ImportError`` when it cannot load), a
    release's lexical index, corpora, and the image codec (an image release's near-copies).
    :class:`~dynaval.service_layer.services.Services` has
    them, and so does the lighter :class:`OfflineServices` that commands on files alone build."""

    @property
    def release_files(self) -> ReleaseFiles: ...

    @property
    def encoder(self) -> Callable[[], Encoder]: ...

    @property
    def release_index(self) -> Callable[[NearDuplicateRule], ReleaseIndex]: ...

    @property
    def corpus(self) -> CorpusFiles: ...

    @property
    def image_codec(self) -> ImageCodec: ...


@dataclass(frozen=True)
class OfflineServices:
    """The :class:`FileServices` the composition root builds (``bootstrap.offline_services``): for
    commands on files alone (``release verify``, ``health contamination``, ``model train``), and
    inside the service's :class:`~dynaval.service_layer.services.Services`."""

    release_files: ReleaseFiles
    encoder: Callable[[], Encoder]
    release_index: Callable[[NearDuplicateRule], ReleaseIndex]
    corpus: CorpusFiles
    image_codec: ImageCodec
