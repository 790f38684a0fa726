"""The round dataset: accepted candidates with full provenance, read a page at a time.

An export reads the kept records (:mod:`.keeping`), written when each decision was made: their
JSON lines go out as stored, with the round's values filled in as the round is now
(:mod:`.stored_record`). Records of a round still marked stale are written first. A candidate's
record outside a round dataset (any status) is built on the spot by the same builder
(:mod:`.record_builder`).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from dynaval.domain.errors import NotFound
from dynaval.service_layer.dataset_records.dataset_port import (
    ColumnPage,
    DatasetReads,
    KeptLines,
    RoundHeader,
)
from dynaval.service_layer.dataset_records.keeping import bring_round_up_to_date
from dynaval.service_layer.dataset_records.record_builder import RecordBuilder
from dynaval.service_layer.dataset_records.stored_record import RoundValues, with_image_urls
from dynaval.service_layer.images.stored_images import image_url

if TYPE_CHECKING:
    from dynaval.settings import Settings


class DatasetServices(Protocol):
    """What the dataset needs of the services: its reads and the pseudonym secret. The whole
    :class:`~dynaval.service_layer.services.Services` will do; ``dynaval export`` builds no more
    than this (the Label Studio client, the models and the task queue cost seconds to import)."""

    settings: Settings
    dataset_reads: DatasetReads | None


def _query(services: DatasetServices) -> DatasetReads:
    if services.dataset_reads is None:
        raise RuntimeError("the round dataset is read from the database, and these services have none")
    return services.dataset_reads


def _round(query: DatasetReads, round_id: int) -> RoundHeader:
    header = query.round(round_id)
    if header is None:
        raise NotFound(f"round {round_id} does not exist", field="round_id")
    return header


def count_accepted(services: DatasetServices, round_id: int) -> int:
    query = _query(services)
    _round(query, round_id)
    return query.count_accepted(round_id)


def _opened(services: DatasetServices, round_id: int, *, catch_up: bool) -> tuple[DatasetReads, RoundValues]:
    """The round's reads, its records brought up to date (unless ``catch_up`` is False), and its
    values as they are now. An unknown round raises :class:`NotFound` here."""
    query = _query(services)
    header = _round(query, round_id)
    if catch_up:
        bring_round_up_to_date(query, services.settings, round_id)
    values = RoundValues.of(
        round_info={"id": header.id, "name": header.name, "state": header.state},
        policy=header.policy,
        project_id=header.label_studio_project_id,
    )
    return query, values


def iter_round_dataset_chunks(
    services: DatasetServices, round_id: int, *, catch_up: bool = True
) -> Iterator[tuple[bytes, int]]:
    """The round dataset's JSON lines (each with its newline), ordered by submission: a page of
    them at a time, as (bytes, number of lines).

    An unknown round raises :class:`NotFound` here, before any page is read (a download answers 404
    before its first byte); the round's records still marked stale are written here too (unless
    ``catch_up`` is False: then the records are read as kept). The round's own fields are read
    once, now (as its state is now), and filled into a whole page at a time.
    """
    query, values = _opened(services, round_id, catch_up=catch_up)
    fills = values.fills()
    settings = services.settings

    def signed(images: str) -> dict[str, str]:
        return {name: image_url(settings, ref) for name, ref in orjson.loads(images).items()}

    def chunks() -> Generator[tuple[bytes, int], None, None]:
        pages = query.kept_lines(round_id)
        try:
            yield from _filled(pages)
        finally:  # a reader stopped early (a download cut off) stops the page reads now
            close = getattr(pages, "close", None)
            if close is not None:
                close()

    def _filled(pages: Iterator[KeptLines]) -> Generator[tuple[bytes, int], None, None]:
        for page in pages:
            chunk, count, with_images = page.lines, page.count, page.images
            del page  # each fill below makes a new copy of the page: the one before it goes
            if with_images:
                lines = _lines_of(chunk)
                for index, images in with_images:
                    lines[index] = with_image_urls(lines[index], signed(images))
                chunk = b"\n".join(lines) + b"\n"
                del lines
            for hole, value in fills.items():
                chunk = chunk.replace(hole, value)
            yield chunk, count
            del chunk

    return chunks()


def iter_round_dataset_columns(
    services: DatasetServices, round_id: int, *, catch_up: bool = True
) -> Iterator[ColumnPage]:
    """The round dataset as the Parquet file's columns, ordered by submission, a page at a time
    (Arrow record batches). An unknown round raises :class:`NotFound` here, before any page; the
    stale records are written first, as for :func:`iter_round_dataset_chunks`."""
    query, values = _opened(services, round_id, catch_up=catch_up)
    return query.kept_columns(round_id, values)


def iter_round_dataset_pieces(services: DatasetServices, round_id: int, fmt: str) -> Iterator[Any]:
    """What a file of format ``fmt`` is written from: JSON line chunks for ``jsonl``, column pages
    for ``parquet``."""
    if fmt == "parquet":
        return iter_round_dataset_columns(services, round_id)
    return iter_round_dataset_chunks(services, round_id)


def _lines_of(chunk: bytes) -> list[bytes]:
    """A chunk's JSON lines, without their newlines (a JSON line holds no other newline byte)."""
    return chunk.split(b"\n")[:-1]


def iter_round_dataset_pages(services: DatasetServices, round_id: int) -> Iterator[list[dict[str, Any]]]:
    """The provenance records of the round's accepted candidates, ordered by submission, in pages
    (the kept records, decoded). An unknown round raises :class:`NotFound` here."""
    loads = orjson.loads
    return (
        [loads(line) for line in _lines_of(chunk)]
        for chunk, _count in iter_round_dataset_chunks(services, round_id)
    )


def kept_release_pages(
    services: DatasetServices, round_id: int
) -> tuple[RoundHeader, Iterator[bytes]] | None:
    """The round as it is now, and its kept release lines (each with its newline), a page at a time,
    in submission order, holes and all (``kept_release_line`` of
    :mod:`dynaval.domain.releases.rows`); the round's stale records are written first. None when
    some record of the round has no release line kept (kept by an earlier version): its rows are
    then made from the records (:func:`iter_round_dataset_pages`). An unknown round raises
    :class:`NotFound` here."""
    query = _query(services)
    header = _round(query, round_id)
    bring_round_up_to_date(query, services.settings, round_id)
    pages = query.kept_release_lines(round_id)
    if pages is None:
        return None
    return header, (page.lines for page in pages)


def built_round_dataset_pages(services: DatasetServices, round_id: int) -> Iterator[list[dict[str, Any]]]:
    """The records as the builder makes them now from the stored candidates and votes, without the
    kept records: the reference the kept ones are checked against."""
    query = _query(services)
    builder = RecordBuilder(services.settings, _round(query, round_id))
    return (builder.page(page) for page in query.accepted_pages(round_id))


def iter_round_dataset(services: DatasetServices, round_id: int) -> Iterator[dict[str, Any]]:
    """One provenance record per accepted candidate, ordered by submission."""
    for page in iter_round_dataset_pages(services, round_id):
        yield from page


def provenance_record(services: DatasetServices, candidate_id: str) -> dict[str, Any]:
    """Any candidate's provenance record, accepted or not: the same fields as a dataset record."""
    query = _query(services)
    found = query.candidate(candidate_id)
    if found is None:
        raise NotFound(f"candidate {candidate_id} does not exist", field="candidate_id")
    round_id, page = found
    builder = RecordBuilder(services.settings, _round(query, round_id))
    return builder.page(page)[0]
