"""The HTTP contract: health, the OpenAPI document, and who may call what.

The document and the refusals (401, 403) need no Label Studio: the app is built with ``bootstrap`` and
``create_app(start_background=False)`` and pointed at a port where nothing listens, so any call that
reached Label Studio would fail loudly. What a token is *allowed* to do runs against ``live_service``
(the real Label Studio), on SQLite and PostgreSQL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

from dynaval.bootstrap import bootstrap
from dynaval.entrypoints.app import create_app, shutdown
from dynaval.entrypoints.webhook import WEBHOOK_PATH
from tests.fixtures.service import (
    LEAD_TOKEN,
    WEBHOOK_SECRET,
    WRITER_TOKEN,
    LiveService,
    free_port,
    make_settings,
    offline_app,
)

HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    """One offline app on SQLite for the tests that do not depend on the database."""
    folder = tmp_path_factory.mktemp("api-contract")
    application = offline_app(f"sqlite:///{folder / 'dynaval.sqlite3'}", folder)
    try:
        yield application
    finally:
        shutdown(application)


@pytest.fixture(scope="module")
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture(scope="module")
def document(client: FlaskClient) -> dict[str, Any]:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    body = response.get_json()
    assert isinstance(body, dict)
    return body


# ---------------------------------------------------------------------------------------- health


def test_health_answers_without_a_token(database_url: str, tmp_path: Path) -> None:
    application = offline_app(database_url, tmp_path)
    try:
        response = application.test_client().get("/health")
    finally:
        shutdown(application)
    assert response.status_code == 200
    body = response.get_json()
    assert body["status"] == "ok" and body["database"] == "ok"
    assert isinstance(body["version"], str) and body["version"]


def test_an_unreachable_database_answers_503_with_retry_after(tmp_path: Path) -> None:
    settings = make_settings(
        database_url=f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nowhere",
        data_dir=tmp_path / "data",
        label_studio_url=f"http://127.0.0.1:{free_port()}",
        label_studio_api_key="unused-in-these-tests",
        public_url="http://127.0.0.1:8000",
        model_dir=tmp_path / "no-model",
    )
    application = create_app(bootstrap(settings, migrate=False), start_background=False)
    try:
        client = application.test_client()
        response = client.get("/api/rounds", headers={"Authorization": f"Bearer {LEAD_TOKEN}"})
        health = client.get("/health").get_json()
    finally:
        shutdown(application)
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    error = response.get_json()["error"]
    assert error["code"] == "unavailable" and "database" in error["message"]
    assert "postgres@" not in response.get_data(as_text=True)  # no connection details
    assert health["database"].startswith("unavailable")


# ------------------------------------------------------------------------------------ OpenAPI


def openapi_path(rule: str) -> str:
    """Werkzeug's ``/a/<int:x>/<y>`` as OpenAPI's ``/a/{x}/{y}``."""
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule)


def registered_operations(app: Flask, *, skip_endpoints: set[str]) -> set[tuple[str, str]]:
    """Every JSON operation the app serves. The dashboard's HTML pages (blueprint ``dashboard``) and
    the writers' page (blueprint ``writer``) are not part of the API document;
    tests/e2e/test_dashboard_pages.py and tests/e2e/test_writer_page.py cover them."""
    operations = {(WEBHOOK_PATH, "post")}  # the endpoint in front of Flask: no Flask rule
    for rule in app.url_map.iter_rules():
        if rule.rule == "/openapi.json" or rule.endpoint in skip_endpoints:
            continue
        if rule.endpoint.startswith(("dashboard.", "writer.")):
            continue
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}:
            operations.add((openapi_path(rule.rule), method.lower()))
    return operations


def documented_operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (path, method)
        for path, item in document["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def resolve(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), f"only local references are expected: {ref}"
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def refs_in(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs_in(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs_in(value)


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS:
                yield path, method, operation


def test_openapi_lists_every_route_the_app_serves(app: Flask, document: dict[str, Any]) -> None:
    # Flask's own /static route is compared in the next test.
    assert documented_operations(document) == registered_operations(app, skip_endpoints={"static"})
    assert "/openapi.json" not in document["paths"]


def test_the_app_registers_no_route_the_document_leaves_out(app: Flask, document: dict[str, Any]) -> None:
    assert documented_operations(document) == registered_operations(app, skip_endpoints=set())


def test_openapi_is_a_structurally_valid_3_1_document(document: dict[str, Any]) -> None:
    # openapi-spec-validator is not a dependency; these are the rules of OpenAPI 3.1 that the
    # generated document could break, checked by hand.
    assert re.fullmatch(r"3\.1\.\d+", document["openapi"])
    assert set(document) <= {"openapi", "info", "jsonSchemaDialect", "servers", "paths", "webhooks",
                              "components", "security", "tags", "externalDocs"}  # fmt: skip
    assert isinstance(document["info"]["title"], str) and isinstance(document["info"]["version"], str)
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearer"] == {"type": "http", "scheme": "bearer"}

    operation_ids = []
    for path, method, operation in operations(document):
        where = f"{method.upper()} {path}"
        assert path.startswith("/") and "<" not in path and ">" not in path, where
        operation_ids.append(operation["operationId"])
        assert operation["responses"], where
        for status, response in operation["responses"].items():
            assert re.fullmatch(r"[1-5]\d\d", status), where
            assert isinstance(response["description"], str) and response["description"], where
        # Every {name} in the path is a required path parameter, and nothing else is.
        templated = set(re.findall(r"{([^}]+)}", path))
        path_params = {p["name"] for p in operation["parameters"] if p["in"] == "path"}
        assert templated == path_params, where
        seen = set()
        for parameter in operation["parameters"]:
            assert parameter["in"] in {"path", "query", "header", "cookie"}, where
            assert (parameter["name"], parameter["in"]) not in seen, where
            seen.add((parameter["name"], parameter["in"]))
            if parameter["in"] == "path":
                assert parameter["required"] is True, where
            Draft202012Validator.check_schema(parameter["schema"])
        for requirement in operation.get("security", []):
            assert set(requirement) <= set(schemes), where
    assert len(operation_ids) == len(set(operation_ids)), "operationId must be unique"

    # Every reference resolves, and every component schema is a valid JSON Schema 2020-12.
    for ref in refs_in(document):
        resolve(document, ref)
    for name, schema in document["components"]["schemas"].items():
        try:
            Draft202012Validator.check_schema(schema)
        except Exception as exc:  # pragma: no cover - the message names the schema
            pytest.fail(f"components.schemas.{name} is not a valid JSON Schema: {exc}")


def test_every_error_response_references_the_error_schema(document: dict[str, Any]) -> None:
    errors = 0
    for path, method, operation in operations(document):
        for status, response in operation["responses"].items():
            if int(status) >= 400:
                errors += 1
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/Error"}, f"{method.upper()} {path} {status}"
    assert errors > 0
    error = document["components"]["schemas"]["Error"]
    validator = Draft202012Validator(error)
    validator.validate(
        {"error": {"code": "not_found", "message": "round 9 does not exist", "field": "round_id"}}
    )
    validator.validate({"error": {"code": "internal", "message": "internal error", "field": None}})
    with pytest.raises(ValidationError):
        validator.validate({"error": {"code": "x", "message": "no field"}})


def test_every_secured_operation_documents_its_auth_errors(document: dict[str, Any]) -> None:
    missing = []
    for path, method, operation in operations(document):
        if not operation.get("security"):
            continue
        wanted = ["401"] + (["403"] if operation.get("description") == "Roles: lead" else [])
        missing += [f"{method.upper()} {path} {s}" for s in wanted if s not in operation["responses"]]
    assert missing == []


def body_validator(document: dict[str, Any], path: str) -> tuple[dict[str, Any], Draft202012Validator]:
    request_body = document["paths"][path]["post"]["requestBody"]
    assert request_body["required"] is True
    ref = request_body["content"]["application/json"]["schema"]["$ref"]
    schema = resolve(document, ref)
    # Validate against the whole document so that the schema's own #/components references resolve.
    return schema, Draft202012Validator({"$ref": ref, "components": document["components"]})


def test_request_bodies_publish_their_required_fields(document: dict[str, Any]) -> None:
    rounds, validate_round = body_validator(document, "/api/rounds")
    assert set(rounds["required"]) == {"name", "task"}
    assert {"name", "task", "model", "policy"} <= set(rounds["properties"])
    validate_round.validate({"name": "r1", "task": "sentiment"})
    validate_round.validate(
        {"name": "r1", "task": "sentiment", "model": "default", "policy": {"min_votes": 3}}
    )
    for bad in (
        {"task": "sentiment"},
        {"name": "r1"},
        {"name": "r1", "task": "sentiment", "policy": {"x": 1}},
    ):
        with pytest.raises(ValidationError):
            validate_round.validate(bad)

    cands, validate_candidate = body_validator(document, "/api/rounds/{round_id}/candidates")
    # writer_id is optional: the token names a writer; only a collector's token needs it. Which
    # inputs are required is the round's task type's (checked by the route with a 422 naming
    # inputs.<field>): the body publishes inputs as an object of texts, and text as its short form.
    assert set(cands["required"]) == {"writer_label"}
    assert {"inputs", "text", "writer_label", "writer_id", "rationale"} <= set(cands["properties"])
    assert cands["additionalProperties"] is False
    validate_candidate.validate({"text": "Nice.", "writer_label": "positive", "writer_id": "w"})
    validate_candidate.validate({"text": "Nice.", "writer_label": "positive"})
    validate_candidate.validate(
        {
            "inputs": {"premise": "It rains.", "hypothesis": "It is wet."},
            "writer_label": "yes",
            "rationale": "r",
        }
    )
    for bad in (
        {"text": "Nice."},
        {"text": "Nice.", "writer_label": "positive", "writer_id": ""},
        {"text": "", "writer_label": "positive"},
        {"text": 5, "writer_label": "positive"},
        {"inputs": {"premise": 5}, "writer_label": "positive"},
        {"premise": "It rains.", "writer_label": "positive"},
    ):
        with pytest.raises(ValidationError):
            validate_candidate.validate(bad)


def test_the_document_publishes_the_configured_limits_and_the_app_enforces_them(tmp_path: Path) -> None:
    """The bodies are documented by the models that check them: an app configured with 50
    characters per text and 7 candidates per batch publishes 50 and 7, and refuses one more."""
    application = offline_app(f"sqlite:///{tmp_path / 'limits.sqlite3'}", tmp_path, max_text_chars=50,
                              max_batch_size=7)  # fmt: skip
    try:
        client = application.test_client()
        document = client.get("/openapi.json").get_json()
        schemas = document["components"]["schemas"]
        batch = document["paths"]["/api/rounds/{round_id}/candidates/batch"]["post"]
        assert batch["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
            "/CandidateBatch"
        )
        candidates = schemas["CandidateBatch"]["properties"]["candidates"]
        assert (candidates["minItems"], candidates["maxItems"]) == (1, 7)
        text = next(
            s for s in schemas["CandidateCreate"]["properties"]["text"]["anyOf"] if s["type"] == "string"
        )
        assert (text["minLength"], text["maxLength"]) == (1, 50)
        inputs = next(
            s for s in schemas["CandidateCreate"]["properties"]["inputs"]["anyOf"] if s["type"] == "object"
        )
        # An input is a text under the text limit, or an image's data URL under the image limit.
        assert inputs["additionalProperties"]["anyOf"][0]["maxLength"] == 50
        gold_text = schemas["GoldItem"]["properties"]["text"]["anyOf"][0]
        gold_inputs = schemas["GoldItem"]["properties"]["inputs"]["anyOf"][0]
        assert (
            gold_text["maxLength"] == 50
            and gold_inputs["additionalProperties"]["anyOf"][0]["maxLength"] == 50
        )
        # The inputs a writer asks the model about are checked by the same limit, and no other key.
        predict_inputs = schemas["PredictRequest"]["properties"]["inputs"]["anyOf"][0]
        assert predict_inputs["additionalProperties"]["anyOf"][0]["maxLength"] == 50
        for name in ("CandidateCreate", "GoldItem", "PredictRequest"):
            assert schemas[name]["additionalProperties"] is False, name
        assert "2000" not in str(schemas["CandidateCreate"]) and "100" not in candidates["description"]

        # The same models check the bodies: refused before the round is even looked up.
        headers = {"Authorization": f"Bearer {WRITER_TOKEN}"}
        good = {"text": "é" * 50, "writer_label": "positive"}
        over = client.post("/api/rounds/1/candidates", json={**good, "text": "é" * 51}, headers=headers)
        assert over.status_code == 413, over.get_json()
        assert over.get_json()["error"]["field"] == "text" and "50" in over.get_json()["error"]["message"]
        eight = client.post(
            "/api/rounds/1/candidates/batch", json={"candidates": [good] * 8}, headers=headers
        )
        assert eight.status_code == 413 and eight.get_json()["error"]["field"] == "candidates"
        # At the limits the body is taken, and the use case answers: there is no round 1.
        for path, body in (("/api/rounds/1/candidates", good), ("/api/rounds/1/candidates/batch",
                                                                  {"candidates": [good] * 7})):  # fmt: skip
            answer = client.post(path, json=body, headers=headers)
            assert answer.status_code == 404 and answer.get_json()["error"]["field"] == "round_id"
    finally:
        shutdown(application)


# ------------------------------------------------------------------------------ who may call what


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # {round}, {candidate} and {release} are filled in with real ids
    roles: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"

    @property
    def openapi_path(self) -> str:
        return (
            self.path.replace("{round}", "{round_id}")
            .replace("{candidate}", "{candidate_id}")
            .replace("{release}", "{release_id}")
        )


LEAD, WRITERS, READERS = ("lead",), ("writer", "collector", "lead"), ("exporter", "lead")
OWN_WRITERS = ("writer", "lead")  # who writes as themselves (a collector submits for others)
EVERY_ROLE = ("writer", "collector", "exporter", "reporter", "lead")
REPORTERS = ("reporter", "lead")  # who reports failure captures
CANDIDATE_READERS = ("writer", "collector", "reporter", "lead")  # each its own candidates; a lead all
ROUTES = [
    Route("POST", "/api/rounds", LEAD),
    Route("POST", "/api/rounds/{round}/close", LEAD),
    Route("POST", "/api/rounds/{round}/freeze", LEAD),
    Route("POST", "/api/rounds/{round}/sync", LEAD),
    Route("GET", "/api/rounds/{round}/dataset", READERS),
    Route("GET", "/api/rounds", EVERY_ROLE),
    Route("GET", "/api/rounds/{round}", EVERY_ROLE),
    Route("POST", "/api/rounds/{round}/candidates", WRITERS),
    Route("GET", "/api/candidates/{candidate}", CANDIDATE_READERS),
    Route("POST", "/api/rounds/{round}/captures", REPORTERS),
    Route("POST", "/api/rounds/{round}/predict", WRITERS),  # a collector asks for its writers too
    Route("GET", "/api/rounds/{round}/my-candidates", OWN_WRITERS),
    Route("POST", "/api/releases", LEAD),
    Route("GET", "/api/releases", READERS),
    Route("GET", "/api/releases/{release}", READERS),
    Route("GET", "/api/releases/{release}/download", READERS),
]
ROUND_BODY = {"name": "auth round", "task": "sentiment", "model": "default"}
CANDIDATE_BODY = {"text": "What a lovely day.", "writer_label": "positive"}  # the token names the writer


def json_body(route: Route) -> dict[str, Any] | None:
    if route.method != "POST":
        return None
    return {
        "/api/rounds": ROUND_BODY,
        "/api/rounds/{round}/candidates": CANDIDATE_BODY,
        "/api/rounds/{round}/predict": {"text": CANDIDATE_BODY["text"]},
    }.get(route.path, {})


def secured_routes(app: Flask) -> dict[tuple[str, str], tuple[str, ...]]:
    """Every route the app guards with a role, as (OpenAPI path, method) -> its roles."""
    return {
        (openapi_path(rule.rule), method): tuple(roles)
        for rule in app.url_map.iter_rules()
        if (roles := getattr(app.view_functions[rule.endpoint], "required_roles", None))
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}
    }


def test_the_route_table_has_the_documented_roles(app: Flask) -> None:
    secured = secured_routes(app)
    table = {(r.openapi_path, r.method): r.roles for r in ROUTES}
    assert {key: secured.get(key) for key in table} == table
    # Every route, with every caller, is in tests/e2e/test_access.py.
    assert set(secured.values()) <= {
        LEAD,
        WRITERS,
        READERS,
        EVERY_ROLE,
        OWN_WRITERS,
        REPORTERS,
        CANDIDATE_READERS,
    }


NO_VALID_TOKEN = {
    "none": None,
    "empty": "",
    "empty bearer": "Bearer ",
    "unknown": "Bearer not-a-known-token-0123456789",
    "wrong scheme": f"Token {LEAD_TOKEN}",
    "no scheme": LEAD_TOKEN,
    "webhook secret": f"Bearer {WEBHOOK_SECRET}",
}


def call(client: FlaskClient, method: str, path: str, authorization: str | None) -> tuple[int, Any]:
    """Status and the error's field (real ids are not needed: the role is checked first)."""
    headers = {} if authorization is None else {"Authorization": authorization}
    path = re.sub(r"{round_id}|{release_id}|{job_id}", "1", path)
    path = re.sub(r"{[^}]+}", "00000000-0000-0000-0000-000000000000", path)
    response = client.open(path, method=method, headers=headers, json={} if method == "POST" else None)
    body = response.get_json(silent=True)
    field = body["error"]["field"] if isinstance(body, dict) and "error" in body else body
    return response.status_code, field


def test_no_valid_token_is_refused_with_401_on_every_secured_route(app: Flask, client: FlaskClient) -> None:
    secured = secured_routes(app)
    assert len(secured) >= len(ROUTES)
    answers = {
        (f"{method} {path}", kind): call(client, method, path, auth)
        for path, method in secured
        for kind, auth in NO_VALID_TOKEN.items()
    }
    assert answers == dict.fromkeys(answers, (401, "Authorization"))


def test_a_writer_is_refused_with_403_on_every_lead_route(app: Flask, client: FlaskClient) -> None:
    lead_only = [key for key, roles in secured_routes(app).items() if "writer" not in roles]
    assert {(r.openapi_path, r.method) for r in ROUTES if "writer" not in r.roles} <= set(lead_only)
    answers = {
        f"{method} {path}": call(client, method, path, f"Bearer {WRITER_TOKEN}") for path, method in lead_only
    }
    assert answers == dict.fromkeys(answers, (403, "Authorization"))
    response = client.post(
        "/api/rounds", json=ROUND_BODY, headers={"Authorization": f"Bearer {WRITER_TOKEN}"}
    )
    assert response.get_json()["error"] == {
        "code": "forbidden",
        "message": "this needs the lead role",
        "field": "Authorization",
    }


def test_the_webhook_refuses_a_missing_or_wrong_secret(client: FlaskClient) -> None:
    payload = {"action": "ANNOTATION_CREATED", "project": {"id": 1}, "annotation": {"id": 1, "task": 1}}
    attempts: dict[str, dict[str, str]] = {
        "none": {},
        "empty": {"X-Dynaval-Webhook-Secret": ""},
        "wrong": {"X-Dynaval-Webhook-Secret": "wrong-secret-0123456789abcdef"},
        "longer": {"X-Dynaval-Webhook-Secret": WEBHOOK_SECRET + "x"},
        "a lead token instead": {"Authorization": f"Bearer {LEAD_TOKEN}"},
    }
    answers = {}
    for kind, headers in attempts.items():
        response = client.post("/webhooks/label-studio", json=payload, headers=headers)
        answers[kind] = (response.status_code, response.get_json()["error"]["field"])
    assert answers == dict.fromkeys(attempts, (401, "X-Dynaval-Webhook-Secret"))


@pytest.mark.labelstudio
def test_tokens_against_the_live_service(live_service: LiveService) -> None:
    """With real ids: a writer is refused on every lead route and changes nothing, and is served on
    every writer route; a lead is served everywhere; no token is refused everywhere."""
    created = live_service.call("POST", "/api/rounds", json=ROUND_BODY)
    assert created.status_code == 201, created.text
    round_id = created.json()["id"]
    submitted = live_service.call(
        "POST", f"/api/rounds/{round_id}/candidates", token=WRITER_TOKEN, json=CANDIDATE_BODY
    )
    assert submitted.status_code == 201, submitted.text
    ids = {"round": round_id, "candidate": submitted.json()["id"], "release": 1}  # no release exists

    def status_of(route: Route, token: str | None) -> int:
        path = route.path.format(**ids)
        return live_service.call(route.method, path, token=token, json=json_body(route)).status_code

    # Refusals first, so that nothing a refused call might have done goes unnoticed.
    refused = {r.name: status_of(r, None) for r in ROUTES}
    assert refused == {r.name: 401 for r in ROUTES}
    as_writer = {r.name: status_of(r, WRITER_TOKEN) for r in ROUTES}
    expected_writer = {
        "POST /api/rounds": 403,
        "POST /api/rounds/{round}/close": 403,
        "POST /api/rounds/{round}/freeze": 403,
        "POST /api/rounds/{round}/sync": 403,
        "GET /api/rounds/{round}/dataset": 403,
        "GET /api/rounds": 200,
        "GET /api/rounds/{round}": 200,
        "POST /api/rounds/{round}/candidates": 201,
        "GET /api/candidates/{candidate}": 200,
        "POST /api/rounds/{round}/captures": 403,
        "POST /api/rounds/{round}/predict": 200,
        "GET /api/rounds/{round}/my-candidates": 200,
        "POST /api/releases": 403,
        "GET /api/releases": 403,
        "GET /api/releases/{release}": 403,
        "GET /api/releases/{release}/download": 403,
    }
    assert as_writer == expected_writer
    rounds = live_service.call("GET", "/api/rounds", token=WRITER_TOKEN).json()["rounds"]
    assert [r["id"] for r in rounds] == [round_id]  # the writer's POST created no round
    assert rounds[0]["state"] == "open"  # and its close did not close it

    # A lead may do everything; close last, since a closed round takes no candidates.
    close = next(r for r in ROUTES if r.path.endswith("/close"))
    as_lead = {r.name: status_of(r, LEAD_TOKEN) for r in [*(r for r in ROUTES if r != close), close]}
    assert as_lead == {
        **expected_writer,
        "POST /api/rounds": 201,
        "POST /api/rounds/{round}/close": 200,
        "POST /api/rounds/{round}/freeze": 409,  # allowed, but the round is still open then
        "POST /api/rounds/{round}/sync": 200,
        "GET /api/rounds/{round}/dataset": 200,
        "POST /api/rounds/{round}/captures": 422,  # an empty body: nothing is reported
        "POST /api/releases": 422,  # an empty body: nothing is built
        "GET /api/releases": 200,
        "GET /api/releases/{release}": 404,
        "GET /api/releases/{release}/download": 404,
    }
    state = live_service.call("GET", f"/api/rounds/{round_id}", token=WRITER_TOKEN).json()["state"]
    assert state == "closed"
