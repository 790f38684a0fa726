"""Counts in words: the noun agrees with the count."""

from dynaval.domain.wording import counted


def test_one_takes_the_singular_and_every_other_count_the_plural() -> None:
    counts = [counted(n, "writer") for n in (0, 1, 2, 21)]
    assert counts == ["0 writers", "1 writer", "2 writers", "21 writers"]


def test_a_phrase_with_its_verb_gives_both_forms() -> None:
    assert counted(1, "writer is", "writers are") == "1 writer is"
    assert counted(3, "writer is", "writers are") == "3 writers are"
