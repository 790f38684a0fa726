"""What counts as text a person can read: the rule for every text users submit that reaches
annotators or a dataset (candidate inputs, gold items, a collector's writer ids, round names).

Text is stored NFC-normalised, so one word has one encoding (``é`` is one code point however it was
typed) and length limits count what is stored. Text is refused when it has no visible character:
whitespace, control characters and characters that render as nothing (format characters, category
Cf, such as U+200B ZERO WIDTH SPACE, and the few other default-ignorable ones) do not count.
"""

from __future__ import annotations

import unicodedata

# Default_Ignorable_Code_Point characters (Unicode's DerivedCoreProperties) outside category Cf:
# fillers and selectors that render as nothing on their own.
_IGNORABLE_RANGES = (
    (0x034F, 0x034F),  # COMBINING GRAPHEME JOINER
    (0x115F, 0x1160),  # HANGUL CHOSEONG and JUNGSEONG FILLER
    (0x17B4, 0x17B5),  # KHMER VOWEL INHERENT AQ and AA
    (0x180B, 0x180F),  # MONGOLIAN FREE VARIATION SELECTORS (0x180E is Cf)
    (0x2060, 0x206F),  # WORD JOINER .. NOMINAL DIGIT SHAPES, unassigned ones included
    (0x3164, 0x3164),  # HANGUL FILLER
    (0xFE00, 0xFE0F),  # VARIATION SELECTORS
    (0xFFA0, 0xFFA0),  # HALFWIDTH HANGUL FILLER
    (0xFFF0, 0xFFF8),  # unassigned, reserved as ignorable
    (0xE0000, 0xE0FFF),  # TAGS and VARIATION SELECTORS SUPPLEMENT
)
_NOT_SHOWN = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})


def normalised(text: str) -> str:
    """``text`` as it is stored: NFC."""
    return unicodedata.normalize("NFC", text)


def _renders_as_nothing(char: str) -> bool:
    if char.isspace() or unicodedata.category(char) in _NOT_SHOWN:
        return True
    code = ord(char)
    return any(low <= code <= high for low, high in _IGNORABLE_RANGES)


def has_visible_character(text: str) -> bool:
    """Whether ``text`` shows anything: one character that is not whitespace, a control character
    or a character that renders as nothing (a format character, a filler, a selector)."""
    return any(not _renders_as_nothing(char) for char in text)
