"""What every request must satisfy before a route sees it.

A bounded body, a bounded rate per caller, ids in the path that a row can have, and text the
database can store. Each refusal is an ordinary API error that names the field, raised before any
use case runs, so a refused request changes nothing.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flask import Flask, current_app, g, jsonify, request
from flask_limiter import Limiter, RateLimitExceeded
from limits import RateLimitItem, parse_many
from limits.storage import MemoryStorage, storage_from_string
from limits.strategies import MovingWindowRateLimiter
from werkzeug.routing import IntegerConverter

from dynaval.adapters.db.database import MAX_SERIAL_ID
from dynaval.domain.errors import InvalidInput, NotFound, ScoringLimited, TooLarge
from dynaval.entrypoints.auth import Caller, caller_of_token, session_caller
from dynaval.service_layer.services import Services

log = logging.getLogger(__name__)

LIMITER = "dynaval_limiter"
BODY_LIMIT_SAYS = "DYNAVAL_BODY_LIMIT_SAYS"
"""The app's config key of what a body over the limit is told."""
SCORING_BUDGET = "dynaval_scoring_budget"
# /health is for probes. (Label Studio's webhook is no Flask route: dynaval.entrypoints.webhook.)
# A signed image is loaded by browsers that carry no token (an annotator's, a page's thumbnails), so
# every load would count against the client's address; its signature is its credential, checked
# with one HMAC before one file is read.
RATE_EXEMPT_ENDPOINTS = frozenset({"api.health", "images.signed_image"})


def init_app(app: Flask) -> None:
    """Register the guards on ``app`` (before the routes run, in this order: ids in the URL, rate,
    body size, text in the query and form)."""
    services: Services = app.extensions["dynaval"]
    settings = services.settings
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.config[BODY_LIMIT_SAYS] = body_limit_says(settings.max_body_bytes, settings.max_image_bytes)
    app.url_value_preprocessor(_check_url_values)
    if settings.rate_limit or settings.anonymous_rate_limit:
        limits = RequestLimits(known=settings.rate_limit, anonymous=settings.anonymous_rate_limit)
        limiter = Limiter(
            _rate_key,
            application_limits=[limits.for_request],
            storage_uri=settings.rate_limit_storage,
            strategy="moving-window",
            key_prefix="dynaval",
            # A storage failure (Redis down) must not turn every request into a 500: count in this
            # process's memory until the storage answers again.
            in_memory_fallback_enabled=True,
            in_memory_fallback=[limits.for_request],  # type: ignore[list-item]  # it takes callables
            swallow_errors=True,
        )
        limiter.request_filter(lambda: request.endpoint in RATE_EXEMPT_ENDPOINTS)
        limiter.init_app(app)
        app.extensions[LIMITER] = limiter
        app.register_error_handler(RateLimitExceeded, _too_many_requests)
    if settings.scoring_limit:
        app.extensions[SCORING_BUDGET] = ScoringBudget(settings.scoring_limit, settings.rate_limit_storage)
    app.before_request(_refuse_large_body)
    app.before_request(_refuse_unstorable_query_and_form)


@dataclass(frozen=True)
class RateIdentity:
    """Whom a request counts against: a caller a credential names (a known bearer token, or a
    lead's live dashboard session) by role and name, else the client's address, anonymously."""

    key: str
    known: bool


def rate_identity() -> RateIdentity:
    """The request's :class:`RateIdentity`, worked out once per request.

    A known bearer token counts against its caller (``lead:ana``; never the token itself), and so
    does a lead's dashboard session: a signed-in lead's pages spend the lead's budget, not their
    address's. Everything else (no credential, a made-up token, an ended session) counts against
    the client's address, in a bucket of its own under the stricter ``DYNAVAL_ANONYMOUS_RATE_LIMIT``:
    made-up tokens buy no fresh budget, and anonymous traffic never spends a caller's. The address
    is the connection's, or behind ``DYNAVAL_TRUSTED_PROXIES`` proxies the one they forwarded.
    """
    found: RateIdentity | None = g.get("dynaval_rate_identity")
    if found is None:
        found = g.dynaval_rate_identity = _identify()
    return found


def _identify() -> RateIdentity:
    services: Services = current_app.extensions["dynaval"]
    header = request.headers.get("Authorization")
    caller: Caller | None = None
    if header is None:
        caller = session_caller()
    elif header.startswith("Bearer ") and (token := header.removeprefix("Bearer ").strip()):
        caller = caller_of_token(services.settings, token)
    if caller is None:
        return RateIdentity("anonymous:" + (request.remote_addr or "unknown"), known=False)
    return RateIdentity(f"{caller.role.value}:{caller.name}", known=True)


def _rate_key() -> str:
    return rate_identity().key


@dataclass(frozen=True)
class RequestLimits:
    """The request limit of each kind of caller (``""``: none for that kind)."""

    known: str
    anonymous: str

    def for_request(self) -> str:
        return self.known if rate_identity().known else self.anonymous


def _too_many_requests(error: RateLimitExceeded) -> Any:
    limiter: Limiter = current_app.extensions[LIMITER]
    current = limiter.current_limit
    wait_s = max(1, math.ceil(current.window.reset_time - time.time())) if current is not None else 1
    whom = "for this credential" if rate_identity().known else "from this address without a valid credential"
    body = {
        "error": {
            "code": "rate_limited",
            "message": f"too many requests {whom}: at most {error.limit.limit}; retry after {wait_s} s",
            "field": "Authorization",
        }
    }
    return jsonify(body), 429, {"Retry-After": str(wait_s)}


# ---------------------------------------------------------------------------------- model work

#: One scoring unit is one started run of this many tokens of an example the model reads (its
#: special tokens included; a pair's two texts together): what the model reads, not what was sent,
#: so a text of punctuation (a token a character) costs what it makes the model do. The default
#: model's time per example grows with its tokens (benchmarks/scoring_cost.py, docs/benchmarks.md).
SCORING_UNIT_TOKENS = 16


def scoring_cost(token_counts: Sequence[int]) -> int:
    """The model work of scoring examples of ``token_counts`` tokens, in scoring units: each costs
    one unit per started ``SCORING_UNIT_TOKENS`` tokens (a short sentence one unit, an example of
    256 tokens sixteen)."""
    return sum(max(1, math.ceil(count / SCORING_UNIT_TOKENS)) for count in token_counts)


UNIT_SAYS = f"one per started {SCORING_UNIT_TOKENS} tokens the model reads of each example"


class ScoringBudget:
    """Scoring units per caller in a moving window (``DYNAVAL_SCORING_LIMIT``), counted in the
    request limiter's storage (``DYNAVAL_RATE_LIMIT_STORAGE``: shared by every process with Redis).

    A request's units are spent whole or not at all: a refused request spends nothing. If the
    storage stops answering, units are counted in this process's memory until it answers again
    (checked again after ``RETRY_SHARED_S``): the limit holds per process, and no request fails for it.
    """

    RETRY_SHARED_S = 10.0

    def __init__(self, limit: str, storage_uri: str) -> None:
        self.items: list[RateLimitItem] = parse_many(limit)
        self._shared = MovingWindowRateLimiter(storage_from_string(storage_uri))
        self._local = MovingWindowRateLimiter(MemoryStorage())
        self._shared_down_until = 0.0
        self._lock = threading.Lock()

    @property
    def largest_cost(self) -> int:
        """The most units one request may cost: what the tightest window holds."""
        return min(item.amount for item in self.items)

    def spend(self, key: str, cost: int) -> int | None:
        """Spend ``cost`` units of ``key``'s budget. None when spent; else nothing is spent, and the
        answer is the seconds until the oldest units spent in a full window come back."""
        with self._lock:
            use_shared = time.monotonic() >= self._shared_down_until
        if use_shared:
            try:
                return self._spend(self._shared, key, cost)
            except Exception as error:  # the storage's own errors (Redis down, ...), whatever they are
                kind = type(error).__name__
                log.warning("scoring budget storage unreachable (%s): counting in memory", kind)
                with self._lock:
                    self._shared_down_until = time.monotonic() + self.RETRY_SHARED_S
        return self._spend(self._local, key, cost)

    def _spend(self, limiter: MovingWindowRateLimiter, key: str, cost: int) -> int | None:
        identity = ("dynaval", "scoring", key)
        # Tested in every window before any is spent, so that a refusal spends nothing. (A
        # concurrent request of the same caller can still take the room in between: then hit()
        # refuses this one, having spent in the windows before.)
        for item in self.items:
            if not limiter.test(item, *identity, cost=cost):
                return self._wait_s(limiter, item, identity)
        for item in self.items:
            if not limiter.hit(item, *identity, cost=cost):
                return self._wait_s(limiter, item, identity)
        return None

    @staticmethod
    def _wait_s(limiter: MovingWindowRateLimiter, item: RateLimitItem, identity: tuple[str, ...]) -> int:
        reset_at = limiter.get_window_stats(item, *identity).reset_time
        return max(1, math.ceil(reset_at - time.time()))


def charge_scoring(token_counts: Sequence[int], field: str) -> None:
    """Charge the caller's scoring budget for the model scoring examples of ``token_counts`` tokens.

    Every route that runs the model calls this once, after its input is validated and before
    anything is stored or scored: over the budget → 429 with ``Retry-After`` (nothing spent, nothing
    stored); more units than the budget holds at all → 413. ``field`` is what the error names (the
    list of examples, or the text).
    """
    budget: ScoringBudget | None = current_app.extensions.get(SCORING_BUDGET)
    if budget is None:
        return
    cost = scoring_cost(token_counts)
    if cost > budget.largest_cost:
        raise TooLarge(
            f"this request costs {cost} scoring units ({UNIT_SAYS}), more than the "
            f"{budget.largest_cost} a caller may spend at once; send fewer or shorter examples",
            field=field,
        )
    wait_s = budget.spend(_rate_key(), cost)
    if wait_s is not None:
        limits = "; ".join(str(item) for item in budget.items)
        raise ScoringLimited(
            f"scoring budget spent for this credential: at most {limits} scoring units ({UNIT_SAYS}), "
            f"and this request costs {cost}; retry after {wait_s} s",
            field=field,
            retry_after_s=wait_s,
        )


def body_limit_says(max_body_bytes: int, max_image_bytes: int) -> str:
    """What a body over the limit is told: the limit, and an image's own (an image a little over
    its limit, as base64, is over the body's before its own is looked at)."""
    return (
        f"the body must be at most {max_body_bytes} bytes (DYNAVAL_MAX_BODY_BYTES); an image in it, "
        f"at most {max_image_bytes} bytes (DYNAVAL_MAX_IMAGE_BYTES)"
    )


def _refuse_large_body() -> None:
    # Werkzeug refuses an oversized body only when a route reads it; this refuses it on every
    # route, before anything else looks at the request. A chunked body (no Content-Length) is cut
    # by Werkzeug at the same limit while it is read.
    limit = current_app.config["MAX_CONTENT_LENGTH"]
    if request.content_length is not None and request.content_length > limit:
        raise TooLarge(current_app.config[BODY_LIMIT_SAYS], field="body")


def read_body() -> bytes:
    """The request's body, refused with 413 when over the limit, also when it came chunked (no
    Content-Length): Werkzeug then stops reading at the limit without saying that more was sent."""
    data = request.get_data(cache=True)
    limit = current_app.config["MAX_CONTENT_LENGTH"]
    if request.content_length is None and len(data) >= limit and request.environ["wsgi.input"].read(1):
        raise TooLarge(current_app.config[BODY_LIMIT_SAYS], field="body")
    return data


def parse_json(data: bytes, *, strict: bool) -> object:
    """A request body's JSON value, or None when it is not JSON (or not UTF-8). ``strict`` refuses
    what a client can only send by mistake, naming where it is (:func:`json_problem`): NaN and
    Infinity (not JSON, though Python writes them), a key given twice in one object, and text no
    database column takes. Lenient (Label Studio's webhooks) reads NaN and Infinity as floats, and
    a repeated key as its last value."""
    try:
        payload = load_json(data, strict=strict)
    except RecursionError:
        raise InvalidInput("the body nests too deeply", field="body") from None
    except NotJsonValue as error:
        raise InvalidInput(str(error), field="body") from None
    except ValueError:  # not JSON, or not UTF-8
        return None
    if strict and (problem := json_problem(payload)) is not None:
        where, says = problem
        raise InvalidInput(f"{where} {says}", field=where)
    return payload


class NotJsonValue(ValueError):
    """``NaN`` or ``Infinity`` in a strictly read document: Python writes them, JSON has neither."""


class _ObjectWithRepeatedKey(dict[str, object]):
    """A JSON object that gave a key more than once (it holds the last value, as ``json`` keeps);
    ``repeated`` is the first key given again."""

    repeated: str


def _json_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    marked = _ObjectWithRepeatedKey(value)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            marked.repeated = key
            break
        seen.add(key)
    return marked


def _refuse_constant(name: str) -> object:
    raise NotJsonValue(f"{name} is not a JSON value")


def load_json(data: bytes | str, *, strict: bool = True) -> object:
    """A JSON document's value (``ValueError`` when it is none). Strictly, ``NaN`` and ``Infinity``
    raise :class:`NotJsonValue`, and each object that repeats a key is marked for
    :func:`json_problem`; leniently they are read as Python's ``json`` reads them."""
    if not strict:
        return json.loads(data, parse_constant=float)
    return json.loads(data, parse_constant=_refuse_constant, object_pairs_hook=_json_object)


def json_problem(value: object) -> tuple[str, str] | None:
    """The first thing in a strictly loaded JSON value (:func:`load_json`) that no request may hold,
    in document order: where it is (``text``, ``candidates[2].text``, ``body``) and what is wrong
    there. A key given twice in one object (a client that sends two values has a bug the service
    should not guess through), or a key or string that is not :func:`storable`. None when all is
    well. Iterative, so any nesting the JSON parser accepted is fine."""
    stack: list[tuple[str, object]] = [("", value)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, str):
            if not storable(node):
                return where or "body", _UNSTORABLE
        elif isinstance(node, dict):
            if isinstance(node, _ObjectWithRepeatedKey):
                return _at(where, node.repeated), "is given more than once in one object; give each key once"
            items = []
            for key, item in node.items():
                if not storable(str(key)):
                    return where or "body", _UNSTORABLE
                items.append((_at(where, key), item))
            stack.extend(reversed(items))
        elif isinstance(node, list):
            stack.extend(reversed([(f"{where}[{i}]", item) for i, item in enumerate(node)]))
    return None


_UNSTORABLE = "must not contain a NUL character or an unpaired surrogate"


def _at(where: str, key: object) -> str:
    return f"{where}.{key}" if where else str(key)


class NotAnAsciiNumber(str):
    """A path segment in an integer's place that is no number in ASCII digits (``\uff11``, ``1_000``):
    :func:`_check_url_values` answers it with a 404 naming the id before any route sees it."""


class AsciiIntegerConverter(IntegerConverter):
    """The ``int`` path converter, for ASCII digits only.

    Werkzeug's own matches ``\\d+``, which takes every script's digits (``/api/rounds/\uff11`` was round
    1), and Python's ``int()`` takes underscores too. This one matches what they would, so such a
    path still reaches its route's guards, and hands anything but ``[0-9]+`` on as
    :class:`NotAnAsciiNumber`, to be refused there naming the id.
    """

    regex = r"[\d_]+"

    def to_python(self, value: str) -> Any:
        if value.isascii() and value.isdigit():
            return int(value)
        return NotAnAsciiNumber(value)


def query_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer query parameter written in ASCII digits (``bootstrap=1_000`` or ``seed=\uff11`` is
    refused with 422 naming it, though Python's ``int()`` would read them); ``default`` when absent.
    With ``minimum`` and ``maximum``, a value outside them is refused the same way."""
    raw = request.args.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()):
        raise InvalidInput(f"{name} must be a whole number in the digits 0-9", field=name)
    value = int(raw)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        low = "" if minimum is None else f" at least {minimum}"
        high = "" if maximum is None else f" at most {maximum}"
        raise InvalidInput(f"{name} must be{low}{' and' if low and high else ''}{high}", field=name)
    return value


def _check_url_values(endpoint: str | None, values: dict[str, Any] | None) -> None:
    """An id in the path that no row can have is a 404 naming it, never a database error (every
    integer in our paths is the id of an autoincrement row, written in ASCII digits)."""
    for name, value in (values or {}).items():
        noun = name.removesuffix("_id")
        if isinstance(value, NotAnAsciiNumber):
            raise NotFound(f"{noun} {value} does not exist (ids are written in the digits 0-9)", field=name)
        if isinstance(value, int) and not 0 < value <= MAX_SERIAL_ID:
            raise NotFound(f"{noun} {value} does not exist", field=name)
        if isinstance(value, str) and not storable(value):
            raise NotFound(f"{noun} does not exist (no id holds a NUL or unpaired surrogate)", field=name)


def _refuse_unstorable_query_and_form() -> None:
    for source in (request.args, request.form):
        for name, value in source.items(multi=True):
            if not storable(name) or not storable(value):
                raise InvalidInput(f"{name} {_UNSTORABLE}", field=name)


def storable(text: str) -> bool:
    """Whether every database column takes ``text``: no NUL (PostgreSQL refuses it) and no unpaired
    surrogate (no UTF-8 encoding exists for one)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
