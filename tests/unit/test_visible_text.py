"""The rule for text users submit: NFC-normalised, and at least one visible character."""

from __future__ import annotations

import pytest

from dynaval.domain.text import has_visible_character, normalised


@pytest.mark.parametrize(
    "text",
    [
        "",
        " \u3000\u200b",  # a space, an ideographic space, a zero-width space
        "\t\n\r\x0b\x0c",
        "\u200c\u200d\u2060\ufeff",  # joiners, word joiner, byte order mark (format characters)
        "\u00ad\u061c\u180e",  # soft hyphen, Arabic letter mark, Mongolian vowel separator
        "\u3164\u115f\uffa0",  # Hangul fillers
        "\ufe0f\U000e0101\u034f",  # variation selectors, combining grapheme joiner
        "\U000e0041\U000e007f",  # tag characters
        "\x01\x7f\u0085\u2028\u2029",  # control characters, line and paragraph separators
        "\u2800\u2800",  # Braille pattern blank: a symbol drawn as nothing
        "\U0001d159",  # musical symbol null notehead
        "\u0301\u034f\ufe0f",  # combining marks with no base character to sit on
        " \u0301 \u20dd",  # a combining accent and an enclosing circle on spaces
        "\ue000\U000f0000",  # private use: no font is known to draw it
        "\u0378",  # unassigned
    ],
)
def test_text_that_shows_nothing_has_no_visible_character(text: str) -> None:
    assert not has_visible_character(text)


@pytest.mark.parametrize(
    "text",
    ["a", " x ", "\u200bhi\u200b", "这", "😍", "👩\u200d💻", "\u0661", ".", "e\u0301", "\u2801", "$", "½"],
)
def test_text_with_one_visible_character_passes(text: str) -> None:
    assert has_visible_character(text)


def test_text_is_stored_nfc() -> None:
    assert normalised("Cre\u0300me bru\u0302le\u0301e") == "Crème brûlée"
    assert len(normalised("e\u0301" * 10)) == 10
    assert normalised("\u212b") == "\u00c5"  # the angstrom sign is the letter Å
