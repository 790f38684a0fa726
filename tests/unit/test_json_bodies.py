"""How a body's JSON is read: strictly for every route (a repeated key, NaN, text no database
stores are refused, naming where), leniently for Label Studio's webhooks."""

from __future__ import annotations

import pytest

from dynaval.domain.errors import InvalidInput
from dynaval.entrypoints.guards import NotJsonValue, json_problem, load_json, parse_json


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ('{"text": "a", "text": "b"}', "text"),
        (
            '{"candidates": [{"text": "a"}, {"text": "a", "writer_label": "x", "text": "b"}]}',
            "candidates[1].text",
        ),
        ('{"inputs": {"premise": "p", "premise": "q"}}', "inputs.premise"),
        ('[{"a": 1}, {"b": 1, "b": 2}]', "[1].b"),
        # The first problem in the document's order is the one named.
        ('{"a": {"x": 1, "x": 2}, "b": "\\u0000"}', "a.x"),
        ('{"a": "\\u0000", "b": {"x": 1, "x": 2}}', "a"),
    ],
)
def test_the_first_problem_is_named_where_it_is(document: str, where: str) -> None:
    problem = json_problem(load_json(document))
    assert problem is not None and problem[0] == where
    with pytest.raises(InvalidInput) as refused:
        parse_json(document.encode(), strict=True)
    assert refused.value.field == where


def test_a_body_without_problems_is_read_as_json_reads_it() -> None:
    document = '{"text": "a", "nested": {"text": "b"}, "list": [{"text": "c"}]}'
    assert parse_json(document.encode(), strict=True) == {
        "text": "a", "nested": {"text": "b"}, "list": [{"text": "c"}]
    }  # fmt: skip
    assert json_problem(load_json(document)) is None


def test_the_lenient_reading_keeps_the_last_value_and_reads_nan() -> None:
    # Label Studio's webhook: nothing in it is trusted, and an odd body is no writer's bug.
    assert parse_json(b'{"action": "a", "action": "b", "x": NaN}', strict=False) == {
        "action": "b", "x": pytest.approx(float("nan"), nan_ok=True)
    }  # fmt: skip
    with pytest.raises(NotJsonValue):
        load_json('{"x": NaN}')
    with pytest.raises(InvalidInput) as refused:
        parse_json(b'{"x": Infinity}', strict=True)
    assert refused.value.field == "body"
    assert parse_json(b"{not json", strict=True) is None
