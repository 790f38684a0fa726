"""A tiny BERT sequence classifier, built from scratch in a second, for tests that need a real model.

It goes through the same transformers classes and files as a real model (``config.json``,
``model.safetensors``, a tokenizer that ``AutoTokenizer`` reloads), so the real loading code is
exercised; only the weights are small and random. With ``always`` the classifier ignores its input
and always answers that label, which makes end-to-end outcomes deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_WORD_LINES = (
    "the a an this that it is was are were be not no very so too and but or of to in on for",
    "with i you he she we they my your our their good great love excellent wonderful happy best",
    "like bad terrible awful hate worst boring sad poor broken film movie food service hotel",
    "room phone battery screen staff team game weather day time price place book app update",
    "meeting train flight . , ! ?",
)
WORDS = tuple(" ".join(_WORD_LINES).split())
DEFAULT_LABELS = ("positive", "negative", "neutral")


def build_tiny_model(
    folder: Path, labels: Sequence[str] = DEFAULT_LABELS, *, always: str | None = None, seed: int = 0
) -> Path:
    """Write a tiny ``BertForSequenceClassification`` and its tokenizer to ``folder``; return ``folder``.

    ``labels`` become ``id2label`` in order. With ``always`` (one of ``labels``) the classifier's
    weight is zero and its bias picks that label for every input, with probabilities summing to 1.
    """
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    label_list = list(labels)
    if len(set(label_list)) != len(label_list) or len(label_list) < 2:
        raise ValueError(f"labels must be at least two distinct labels, got {label_list}")
    if always is not None and always not in label_list:
        raise ValueError(f"always={always!r} is not one of {label_list}")

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {token: index for index, token in enumerate(dict.fromkeys([*SPECIAL_TOKENS, *WORDS]))}
    # transformers 5: BertTokenizer(vocab_file=...) ignores the file; the vocabulary must be passed as
    # ``vocab=`` (a dict) or the tokenizer loaded with from_pretrained from a folder holding vocab.txt.
    tokenizer = BertTokenizer(vocab=vocab, do_lower_case=True)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=128,
        type_vocab_size=2,
        initializer_range=0.5,  # large random weights, so the untrained model's answers vary with the text
        pad_token_id=vocab["[PAD]"],
        id2label=dict(enumerate(label_list)),
        label2id={label: index for index, label in enumerate(label_list)},
    )
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config)
    if always is not None:
        with torch.no_grad():
            model.classifier.weight.zero_()
            model.classifier.bias.fill_(-4.0)
            model.classifier.bias[label_list.index(always)] = 4.0
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder
