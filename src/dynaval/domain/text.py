"""What counts as text a person can read: the rule for every text users submit that reaches
annotators, a model or a dataset (candidate inputs, ``/predict``, gold items, captures, a
collector's writer ids, round names, reasons), checked in one place: the request models of
:mod:`dynaval.entrypoints.api.schemas`.

Text is stored NFC-normalised, so one word has one encoding (``é`` is one code point however it was
typed) and length limits count what is stored. Text is refused when it has no visible base
character: a letter, a digit, a punctuation mark or a symbol (Unicode's categories L, N, P and S)
that draws something. Whitespace, control and format characters (such as U+200B ZERO WIDTH
SPACE), combining marks with nothing to sit on (U+0301 COMBINING ACUTE ACCENT alone), private-use
and unassigned code points, the default-ignorable fillers and selectors, and the few symbols and
letters that are drawn blank (U+2800 BRAILLE PATTERN BLANK, the Hangul fillers) do not count.
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
# Letters, digits, punctuation and symbols that are drawn as blank space: a text of them looks empty.
_BLANK_GLYPHS = frozenset(
    {
        0x2800,  # BRAILLE PATTERN BLANK (a symbol, So)
        0x1D159,  # MUSICAL SYMBOL NULL NOTEHEAD (So)
    }
)
# Base characters that draw: letters, digits and other numbers, punctuation, symbols. Not marks
# (M: they combine with a base), separators (Z), nor other (C: control, format, private use,
# surrogate, unassigned).
_BASE_CATEGORIES = frozenset("LNPS")


def normalised(text: str) -> str:
    """``text`` as it is stored: NFC."""
    return unicodedata.normalize("NFC", text)


def _is_visible_base(char: str) -> bool:
    if unicodedata.category(char)[0] not in _BASE_CATEGORIES:
        return False
    code = ord(char)
    if code in _BLANK_GLYPHS:
        return False
    return not any(low <= code <= high for low, high in _IGNORABLE_RANGES)


def has_visible_character(text: str) -> bool:
    """Whether ``text`` shows anything: one base character that draws (a letter, a digit, a
    punctuation mark or a symbol, not one drawn blank nor a filler). Whitespace, control and format
    characters, and combining marks on their own, show nothing."""
    return any(_is_visible_base(char) for char in text)
