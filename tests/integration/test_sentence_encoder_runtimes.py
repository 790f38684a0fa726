"""The encoder's two runtimes on the real MiniLM (local, offline): the ONNX graph exported from the
torch model gives torch's vectors, is exported once into the cache and loaded from it after, and
where the graph cannot be made the encoder runs on torch instead of failing."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy
import pytest

from dynaval.adapters.sentence_encoder import SentenceEncoder, graph_name, minilm_folder

TEXTS = [
    "The soup was far too salty.",
    "A man is playing a guitar on stage while the crowd sings along loudly.",
    "Ça n'était pas terrible, honnêtement — 正直に言うと。",
    "ok",
    "",
    " ".join(["long"] * 400),  # cut at 256 tokens by both
]


@pytest.fixture(scope="module")
def torch_vectors() -> numpy.ndarray:
    return SentenceEncoder(runtime="torch").encode(TEXTS)


def test_the_onnx_graph_gives_torch_s_vectors_alone_and_in_a_padded_batch(
    tmp_path: Path, torch_vectors: numpy.ndarray
) -> None:
    encoder = SentenceEncoder(cache=tmp_path)
    batch = encoder.encode(TEXTS)
    assert encoder.runtime_used == "onnx"
    assert batch.dtype == numpy.float32 and batch.shape == (len(TEXTS), 384)
    assert numpy.abs(batch - torch_vectors).max() < 1e-5
    alone = numpy.stack([encoder.encode([text])[0] for text in TEXTS])
    assert numpy.abs(alone - torch_vectors).max() < 1e-5


def test_the_graph_is_exported_once_and_loaded_from_the_cache_after(
    tmp_path: Path, torch_vectors: numpy.ndarray
) -> None:
    graph = tmp_path / graph_name(minilm_folder())
    SentenceEncoder(cache=tmp_path).encode(["first"])
    assert graph.is_file()
    assert [p.name for p in tmp_path.iterdir()] == [graph.name]  # no partial file left behind
    written = graph.stat().st_mtime_ns
    later = SentenceEncoder(cache=tmp_path)
    assert numpy.abs(later.encode(TEXTS) - torch_vectors).max() < 1e-5
    assert later.runtime_used == "onnx"
    assert graph.stat().st_mtime_ns == written


def test_where_the_graph_cannot_be_written_the_encoder_runs_on_torch_and_says_so(
    tmp_path: Path, torch_vectors: numpy.ndarray, caplog: pytest.LogCaptureFixture
) -> None:
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache folder should be")
    encoder = SentenceEncoder(cache=not_a_folder)
    with caplog.at_level(logging.WARNING, logger="dynaval.adapters.sentence_encoder"):
        vectors = encoder.encode(TEXTS)
    assert encoder.runtime_used == "torch"
    assert numpy.abs(vectors - torch_vectors).max() < 1e-6
    assert "MiniLM runs on torch" in caplog.text


def test_an_unknown_runtime_is_refused() -> None:
    with pytest.raises(ValueError, match="onnx or torch"):
        SentenceEncoder(runtime="tensorflow")  # type: ignore[arg-type]


def test_threads_encoding_at_once_get_each_their_own_vectors(
    tmp_path: Path, torch_vectors: numpy.ndarray
) -> None:
    """The service encodes in many request threads with one shared encoder (its tokenizer calls take
    turns: see SentenceEncoder)."""
    encoder = SentenceEncoder(cache=tmp_path)
    encoder.encode(["load first"])
    jobs = [[TEXTS[i % len(TEXTS)], TEXTS[(i + 1) % len(TEXTS)]] for i in range(48)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(encoder.encode, jobs))
    for i, vectors in enumerate(results):
        expected = torch_vectors[[i % len(TEXTS), (i + 1) % len(TEXTS)]]
        assert numpy.abs(vectors - expected).max() < 1e-5
