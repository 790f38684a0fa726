"""The HTTP API: each handler parses the request, calls one use case and renders its answer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify, request

from dynaval.adapters.files.dataset_files import FORMATS, MEDIA_TYPES, encode_dataset
from dynaval.domain.errors import InvalidInput
from dynaval.domain.releases.release import SplitRule
from dynaval.entrypoints.api.job_routes import accepted_job
from dynaval.entrypoints.api.openapi import documented
from dynaval.entrypoints.api.request_bodies import app_services as _services
from dynaval.entrypoints.api.request_bodies import checked_body as _body
from dynaval.entrypoints.api.schemas import (
    CandidateBatch,
    CandidateCreate,
    CaptureRequest,
    ExclusionChange,
    FreezeRequest,
    GateRequest,
    GoldUpload,
    OverrideCreate,
    PredictRequest,
    ReleaseCreate,
    RevalidateRequest,
    RoundCreate,
)
from dynaval.entrypoints.auth import Role, requires
from dynaval.entrypoints.guards import charge_scoring, query_int
from dynaval.service_layer.agreement import reports as agreement
from dynaval.service_layer.dashboard.figures_cache import FiguresCache
from dynaval.service_layer.dataset_records import round_dataset as dataset
from dynaval.service_layer.health import near_duplicates, round_health
from dynaval.service_layer.regression import gate, model_catalog, revalidation, suite_jobs
from dynaval.service_layer.releases import catalog, release_jobs, releases
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation import (
    annotator_exclusion,
    annotators,
    candidate_views,
    candidates,
    captures,
    gold,
    overrides,
    rounds,
    task_types,
)
from dynaval.service_layer.validation import vote_reading as verification

api = Blueprint("api", __name__)

# Who may call what: a writer submits and reads their own candidates, a collector submits for the
# writers it names and reads what it submitted, an exporter reads datasets and agreement reports, a
# reporter reports failure captures to capture rounds and reads its own, a lead does everything;
# every role may list rounds and read their summaries.
EVERY_ROLE = (Role.WRITER, Role.COLLECTOR, Role.EXPORTER, Role.REPORTER, Role.LEAD)
SUBMITTERS = (Role.WRITER, Role.COLLECTOR, Role.LEAD)
REPORTERS = (Role.REPORTER, Role.LEAD)
# Who reads a candidate back: its submitter (a writer, collector or reporter: their own only) or a lead.
CANDIDATE_READERS = (Role.WRITER, Role.COLLECTOR, Role.REPORTER, Role.LEAD)
READERS = (Role.EXPORTER, Role.LEAD)
# Who writes examples as themselves: a writer, or a lead (a collector submits for others).
WRITERS = (Role.WRITER, Role.LEAD)
MY_CANDIDATES_LIMIT = 100
MAX_PAGE = 1_000_000  # past it the offset would leave the database's integers
FIGURES_CACHE = "dynaval_dashboard_figures"
"""The app's per-process cache of round figures (made by the dashboard's ``init_app``), shared by the
pages and the API."""


def _figures_cache() -> FiguresCache:
    cache: FiguresCache = current_app.extensions[FIGURES_CACHE]
    return cache


def _submitter() -> candidates.Submitter:
    """Who submits, from the credential alone (never from the body)."""
    return candidates.Submitter(name=g.caller.name, collects_for_others=g.caller.submits_for_others)


def _sees_model_folder() -> bool:
    """The server's model folder is the operator's business: leads see it, other roles see the
    model's name and hash."""
    return bool(g.caller.role is Role.LEAD)


@api.get("/health")
@documented(summary="Liveness and database check")
def health() -> Any:
    return jsonify(_services().health())


@api.post("/api/rounds")
@documented(
    summary="Create a round: a Label Studio project, its webhook and the pinned model",
    body=RoundCreate,
    responses={
        201: "Created",
        401: "No token",
        403: "Not a lead",
        422: "Invalid field (a model for a capture round among them)",
        503: "Unavailable",
    },
)
@requires(Role.LEAD)
def create_round() -> Any:
    body = _body(RoundCreate)
    services = _services()
    row = rounds.create_round(
        services,
        name=body.name,
        task=body.task,
        model=body.model,
        policy=body.policy.given() if body.policy is not None else None,
        kind=body.round_kind(),
    )
    return jsonify(rounds.round_public(services, row, with_model_folder=True)), 201


@api.get("/api/task-types")
@documented(
    summary="The task types: each one's input fields, labels and default model (built or not)",
    responses={200: "OK", 401: "No token"},
)
@requires(*EVERY_ROLE)
def list_task_types() -> Any:
    listed = task_types.list_task_types(_services(), with_model_folder=_sees_model_folder())
    return jsonify({"task_types": listed})


@api.get("/api/rounds")
@documented(summary="List rounds", responses={200: "OK", 401: "No token"})
@requires(*EVERY_ROLE)
def list_rounds() -> Any:
    return jsonify({"rounds": rounds.list_rounds(_services(), with_model_folder=_sees_model_folder())})


@api.get("/api/me")
@documented(summary="Who the token says the caller is: its name and role", responses={200: "OK"})
@requires(*EVERY_ROLE)
def whoami() -> Any:
    return jsonify({"name": g.caller.name, "role": g.caller.role.value})


@api.get("/api/rounds/<int:round_id>")
@documented(
    summary="A round with its counts, MER, VMER and alpha", responses={200: "OK", 404: "No such round"}
)
@requires(*EVERY_ROLE)
def get_round(round_id: int) -> Any:
    return jsonify(rounds.round_summary(_services(), round_id, with_model_folder=_sees_model_folder()))


@api.post("/api/rounds/<int:round_id>/close")
@documented(
    summary="Close a round: no more candidates", responses={200: "OK", 404: "No such round", 409: "Not open"}
)
@requires(Role.LEAD)
def close_round(round_id: int) -> Any:
    services = _services()
    closed = rounds.close_round(services, round_id)
    return jsonify(rounds.round_public(services, closed, with_model_folder=True))


@api.post("/api/rounds/<int:round_id>/freeze")
@documented(
    summary="Freeze a closed round: its decisions are final (forcing leaves waiting candidates unvalidated)",
    body=FreezeRequest,
    responses={
        200: "The round, frozen, with the number of candidates left unvalidated",
        404: "No such round",
        409: "Open, already frozen, or candidates still waiting for votes (without force)",
        422: "Invalid field, or force without a reason",
    },
)
@requires(Role.LEAD)
def freeze_round(round_id: int) -> Any:
    services = _services()
    # No body (or an empty one) is a plain freeze.
    body = _body(FreezeRequest) if request.content_length else FreezeRequest()
    frozen = rounds.freeze_round(services, round_id, by=g.caller.name, force=body.force, reason=body.reason)
    return jsonify(
        {
            **rounds.round_public(services, frozen.round, with_model_folder=True),
            "unvalidated": frozen.unvalidated,
        }
    )


@api.post("/api/rounds/<int:round_id>/candidates")
@documented(
    summary="Submit a candidate; the round's model scores it at once",
    body=CandidateCreate,
    responses={
        201: "Created",
        403: "Not a writer, collector or lead; or a writer_id naming someone else (only a collector may)",
        404: "No such round",
        409: "Round closed; or, under the round's reject policy, a near-duplicate of an earlier example "
        "(code near_duplicate, field inputs, the near-duplicates in error.near_duplicates; nothing stored)",
        413: "Text too long, or an image over DYNAVAL_MAX_IMAGE_BYTES",
        422: "Invalid field (an image: not a PNG or JPEG, truncated, or over DYNAVAL_MAX_IMAGE_PIXELS)",
        503: "Model unavailable",
    },
    scores=True,
    form=True,
)
@requires(*SUBMITTERS)
def submit_candidate(round_id: int) -> Any:
    services = _services()
    body = _body(CandidateCreate, form=True)
    row = candidates.submit_candidate(
        services,
        round_id=round_id,
        candidate=body.new_candidate(),
        submitter=_submitter(),
        charge=charge_scoring,
    )
    return jsonify(candidate_views.get_candidate(services, row.id, viewer=g.caller.owner)), 201


@api.post("/api/rounds/<int:round_id>/candidates/batch")
@documented(
    summary="Submit several candidates at once, all or nothing; the model scores them together",
    body=CandidateBatch,
    responses={
        201: "Created: the candidates, in the order given",
        403: "Not a writer, collector or lead; or a candidates[i].writer_id naming someone else",
        404: "No such round",
        409: "Round closed; or, under the round's reject policy, a near-duplicate (field "
        "candidates[i].inputs; nothing stored)",
        413: "More candidates than DYNAVAL_MAX_BATCH_SIZE, or a text too long",
        422: "Invalid field, named candidates[i].field; nothing is stored",
        503: "Model unavailable",
    },
    scores=True,
)
@requires(*SUBMITTERS)
def submit_candidate_batch(round_id: int) -> Any:
    services = _services()
    body = _body(CandidateBatch)
    rows = candidates.submit_candidates(
        services,
        round_id=round_id,
        candidates=[c.new_candidate() for c in body.candidates],
        submitter=_submitter(),
        charge=charge_scoring,
    )
    shown = candidate_views.candidates_public(services, [r.id for r in rows], viewer=g.caller.owner)
    return jsonify({"candidates": shown}), 201


@api.post("/api/rounds/<int:round_id>/captures")
@documented(
    summary="Report failures found in production to a capture round (one, or a batch all or none); "
    "each is validated blind in Label Studio like a fooled candidate",
    body=CaptureRequest,
    responses={
        201: "Created: the capture's id, status and near-duplicates (a batch: the ids and a list of "
        "near-duplicates for each, in the order given)",
        403: "Not a reporter or lead",
        404: "No such round",
        409: "Not an open capture round, a reference reported already (the earlier capture named), or "
        "under the round's reject policy a near-duplicate (field inputs or captures[i].inputs)",
        413: "More captures than DYNAVAL_MAX_BATCH_SIZE, or a text too long",
        422: "Invalid field, named captures[i].field in a batch; nothing is stored",
    },
)
@requires(*REPORTERS)
def report_captures(round_id: int) -> Any:
    services = _services()
    given, batch = _body(CaptureRequest).new_captures()
    made = captures.report_captures(
        services, round_id=round_id, captures=given, reporter=g.caller.name, batch=batch
    )
    found = near_duplicates.findings(services, [c.id for c in made], g.caller.owner)
    if batch:
        return jsonify(
            {"ids": [c.id for c in made], "status": made[0].status.value, "near_duplicates": found}
        ), 201
    return jsonify({"id": made[0].id, "status": made[0].status.value, "near_duplicates": found[0]}), 201


@api.post("/api/rounds/<int:round_id>/predict")
@documented(
    summary="Ask the round's model about an example's inputs before submitting it; nothing is stored",
    body=PredictRequest,
    responses={
        200: "The model's label and its probability for each of the round's labels",
        403: "Not a writer, collector or lead",
        404: "No such round",
        409: "Round closed or frozen",
        413: "Text too long",
        422: "Invalid field, or a missing or unknown input of the round's task type",
        503: "Model unavailable",
    },
    scores=True,
    form=True,
)
# The writer's "try it" button, and a collection front end's live guess for the writers it serves
# (charged to its own scoring budget): whoever submits candidates may ask first.
@requires(*SUBMITTERS)
def predict(round_id: int) -> Any:
    body = _body(PredictRequest, form=True)
    answer = candidates.predict(_services(), round_id=round_id, given=body.given(), charge=charge_scoring)
    return jsonify({"prediction": answer.label, "probabilities": answer.probabilities})


@api.get("/api/rounds/<int:round_id>/model")
@documented(
    summary="What the round's model reads of an example: its name, hash and the most tokens "
    "(max_tokens, over the inputs in counted_over together); a longer example is refused",
    responses={
        200: "OK",
        403: "Not a writer, collector or lead",
        404: "No such round",
        409: "Round closed or frozen, or a capture round",
        503: "The round's model cannot be loaded now",
    },
)
@requires(*SUBMITTERS)
def model_reading(round_id: int) -> Any:
    return jsonify(candidates.model_reading(_services(), round_id=round_id))


@api.get("/api/rounds/<int:round_id>/my-candidates")
@documented(
    summary="The caller's own candidates in the round, the newest first, with their MER and VMER",
    query={
        "page": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 1},
        "limit": {"type": "integer", "minimum": 1, "maximum": MY_CANDIDATES_LIMIT, "default": 20},
    },
    responses={200: "OK", 404: "No such round", 422: "Invalid query"},
)
@requires(*WRITERS)
def my_candidates(round_id: int) -> Any:
    page = query_int("page", 1, minimum=1, maximum=MAX_PAGE)
    limit = query_int("limit", 20, minimum=1, maximum=MY_CANDIDATES_LIMIT)
    return jsonify(
        candidate_views.own_candidates(
            _services(), round_id, submitted_by=g.caller.name, page=page, limit=limit
        )
    )


@api.get("/api/candidates/<candidate_id>")
@documented(
    summary="A candidate or capture: status, votes, agreement, decision, a capture's provenance (a "
    "writer, collector or reporter reads only its own)",
    responses={
        200: "OK",
        403: "Submitted with another token, or not a writer, collector, reporter or lead",
        404: "Not found",
    },
)
@requires(*CANDIDATE_READERS)
def get_candidate(candidate_id: str) -> Any:
    return jsonify(candidate_views.get_candidate(_services(), candidate_id, only_submitted_by=g.caller.owner))


@api.post("/api/candidates/<candidate_id>/override")
@documented(
    summary="A lead overrides a candidate's decision (accepted or rejected) with a reason",
    body=OverrideCreate,
    responses={
        200: "The candidate, with the override",
        404: "No such candidate",
        409: "Not in validation yet, or the round is frozen",
        422: "Invalid field",
    },
)
@requires(Role.LEAD)
def override_candidate(candidate_id: str) -> Any:
    body = _body(OverrideCreate)
    return jsonify(
        overrides.override_decision(
            _services(),
            candidate_id=candidate_id,
            outcome=body.outcome,
            reason=body.reason,
            by=g.caller.name,
        )
    )


@api.get("/api/rounds/<int:round_id>/audit")
@documented(summary="The round's audit log: every lead override", responses={200: "OK", 404: "No such round"})
@requires(Role.LEAD)
def audit_log(round_id: int) -> Any:
    return jsonify({"events": overrides.round_audit_log(_services(), round_id)})


@api.post("/api/rounds/<int:round_id>/sync")
@documented(
    summary="Push queued candidates, reconcile every annotation from Label Studio, escalate",
    responses={200: "OK", 503: "Label Studio unavailable"},
)
@requires(Role.LEAD)
def sync_round(round_id: int) -> Any:
    return jsonify(verification.sync_round(_services(), round_id))


@api.get("/api/rounds/<int:round_id>/dataset")
@documented(
    summary="The round dataset: accepted examples with provenance",
    query={"format": {"type": "string", "enum": list(FORMATS), "default": "jsonl"}},
    responses={200: "OK", 404: "No such round", 422: "Unknown format"},
)
@requires(*READERS)
def round_dataset(round_id: int) -> Any:
    fmt = request.args.get("format", "jsonl")
    if fmt not in FORMATS:
        raise InvalidInput(f"format must be one of: {', '.join(FORMATS)}", field="format")
    return dataset_download(_services(), round_id, fmt)


def dataset_download(services: Services, round_id: int, fmt: str) -> Response:
    """The round dataset as a file download, JSONL or Parquet, streamed a page of records at a time
    (the server never holds the whole file)."""
    pages = dataset.iter_round_dataset_pieces(services, round_id, fmt)  # 404 before any byte is sent

    # The body needs neither the request nor the app context (its reads use ``services``), so it
    # is not streamed with them: two downloads' bodies may then be read and closed in any order.
    def body() -> Iterator[bytes]:
        try:
            for data, _records in encode_dataset(pages, fmt):
                if data:
                    yield data
        finally:
            # A client gone mid-download: its reading thread and connection stop now, not when the
            # garbage collector finds them.
            close = getattr(pages, "close", None)
            if close is not None:
                close()

    return Response(
        body(),
        mimetype=MEDIA_TYPES[fmt],
        headers={"Content-Disposition": f'attachment; filename="round-{round_id}.{fmt}"'},
    )


@api.post("/api/rounds/<int:round_id>/gold")
@documented(
    summary="Upload gold items (known labels) to mix into the round's Label Studio project",
    body=GoldUpload,
    responses={201: "Created", 404: "No such round", 413: "Text too long", 422: "Invalid field"},
)
@requires(Role.LEAD)
def upload_gold(round_id: int) -> Any:
    body = _body(GoldUpload)
    ids = gold.add_gold_items(_services(), round_id=round_id, items=[i.new_gold_item() for i in body.items])
    return jsonify({"created": len(ids), "ids": ids}), 201


@api.get("/api/rounds/<int:round_id>/annotators")
@documented(
    summary="Per annotator: votes, gold accuracy, exclusion", responses={200: "OK", 404: "No such round"}
)
@requires(Role.LEAD)
def round_annotators(round_id: int) -> Any:
    return jsonify({"annotators": annotators.annotators_report(_services(), round_id)})


@api.post("/api/rounds/<int:round_id>/annotators/<annotator>/exclusion")
@documented(
    summary="A lead excludes or reinstates an annotator; affected decisions are recomputed",
    body=ExclusionChange,
    responses={200: "OK", 404: "No such round or annotator", 422: "Invalid field"},
)
@requires(Role.LEAD)
def change_exclusion(round_id: int, annotator: str) -> Any:
    body = _body(ExclusionChange)
    return jsonify(
        annotator_exclusion.set_exclusion_by_lead(
            _services(),
            round_id=round_id,
            annotator=annotator,
            excluded=body.excluded,
            reason=body.reason,
        )
    )


@api.get("/api/rounds/<int:round_id>/exclusions")
@documented(summary="The log of exclusions and reinstatements", responses={200: "OK", 404: "No such round"})
@requires(Role.LEAD)
def exclusion_log(round_id: int) -> Any:
    return jsonify({"events": annotator_exclusion.exclusion_log(_services(), round_id)})


@api.get("/api/rounds/<int:round_id>/near-duplicates")
@documented(
    summary="The round's candidates flagged as near-duplicates of earlier examples, the earliest "
    "first, each with its matches (leads look at these first)",
    responses={200: "OK", 404: "No such round"},
)
@requires(Role.LEAD)
def flagged_near_duplicates(round_id: int) -> Any:
    return jsonify(near_duplicates.flagged_candidates(_services(), round_id))


@api.get("/api/rounds/<int:round_id>/agreement")
@documented(
    summary="Round agreement: alpha and its 95% CI, per label, per annotator, pairwise; validation cost",
    query={
        "bootstrap": {"type": "integer", "minimum": 0, "maximum": 10000, "default": 1000},
        "seed": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1, "default": 0},
    },
    responses={200: "OK", 422: "Invalid query"},
)
@requires(*READERS)
def round_agreement(round_id: int) -> Any:
    bootstrap, seed = query_int("bootstrap", 1000), query_int("seed", 0)
    return jsonify(agreement.round_agreement(_services(), round_id, bootstrap=bootstrap, seed=seed))


@api.get("/api/rounds/<int:round_id>/health")
@documented(
    summary="Round health: top-writer shares, distinct-1/2/3, repeated patterns (near-duplicate "
    "clusters), the fooled rate with and without them, and the rounds of its task type side by side "
    "(MER, VMER, alpha, diversity, possible score inflation)",
    responses={200: "OK", 404: "No such round", 503: "Still being computed (first view of a large round)"},
)
@requires(*READERS)
def round_health_figures(round_id: int) -> Any:
    return jsonify(round_health.round_health(_services(), _figures_cache(), round_id).to_dict())


@api.post("/api/releases")
@documented(
    summary="A lead builds a release of frozen rounds of one task type, as a job (202, its URL in Location)",
    body=ReleaseCreate,
    responses={
        202: "The queued job (watch it at Location: GET /api/jobs/<id>; its result names the release)",
        404: "No such round",
        409: "A round is not frozen, the version exists, or this release name is being built",
        422: "Invalid field",
    },
)
@requires(Role.LEAD)
def create_release() -> Any:
    body = _body(ReleaseCreate)
    shares = body.shares
    rule = SplitRule(
        shares=(float(shares.train), float(shares.dev), float(shares.test)) if shares else (0.8, 0.1, 0.1),
        min_agreeing_validators=body.min_agreeing_validators,
        balance_dev_test=body.balance_dev_test,
        seed=body.seed,
    )
    job = release_jobs.submit_release(
        _services(),
        releases.ReleaseRequest(
            round_ids=body.rounds,
            version=body.version,
            created_by=g.caller.name,
            name=body.name,
            license=body.license,
            rule=rule,
        ),
    )
    return accepted_job(job)


@api.post("/api/gate")
@documented(
    summary="A lead gates a candidate model against the baseline on the regression suite, as a job "
    "(202, its URL in Location; the run is recorded)",
    body=GateRequest,
    responses={
        202: "The queued job; its result: passed, negative_flips, positive_flips, per_round, mcnemar",
        403: "Not a lead",
        409: "A gate job for this candidate folder is queued or running",
        422: "Invalid field (a candidate that is no model folder, no shipped model and no baseline)",
    },
)
@requires(Role.LEAD)
def run_gate() -> Any:
    body = _body(GateRequest)
    job = suite_jobs.submit_gate(
        _services(), body.candidate, baseline=body.baseline, max_flips=body.max_flips, by=g.caller.name
    )
    return accepted_job(job)


@api.post("/api/suite/revalidate")
@documented(
    summary="A lead sends suspect regression cases back to Label Studio for re-validation (logged)",
    body=RevalidateRequest,
    responses={
        201: "rounds (each new revalidation round's id and the cases sent to it) and cases (every case sent)",
        403: "Not a lead",
        409: "A named case is retired, not suspect, confirmed, or under re-validation already",
        422: "Invalid field (an unknown case)",
    },
)
@requires(Role.LEAD)
def revalidate_suspects() -> Any:
    body = _body(RevalidateRequest)
    sent = revalidation.send_suspects_to_revalidation(
        _services(), case_ids=body.cases, by=g.caller.name, name=body.name
    )
    return jsonify(sent.to_dict()), 201


@api.get("/api/suite/suspects")
@documented(
    summary="The suspect cases still in the suite, each with its re-validation state",
    responses={200: "OK", 403: "Not a lead"},
)
@requires(Role.LEAD)
def list_suspects() -> Any:
    return jsonify({"cases": revalidation.suspect_queue(_services())})


@api.get("/api/gate-runs")
@documented(summary="The latest recorded gate runs, newest first", responses={200: "OK"})
@requires(Role.LEAD)
def list_gate_runs() -> Any:
    return jsonify({"gate_runs": gate.gate_runs(_services())})


@api.get("/api/models")
@documented(summary="Registered models (by content hash) with their shipped state", responses={200: "OK"})
@requires(*READERS)
def list_models() -> Any:
    hide = () if _sees_model_folder() else ("folder",)
    models = [m.to_dict() for m in model_catalog.list_models(_services())]
    return jsonify({"models": [{k: v for k, v in m.items() if k not in hide} for m in models]})


@api.get("/api/releases")
@documented(summary="Every release, oldest first (without manifests)", responses={200: "OK"})
@requires(*READERS)
def list_releases() -> Any:
    return jsonify({"releases": [catalog.release_summary(r) for r in catalog.list_releases(_services())]})


@api.get("/api/releases/<int:release_id>")
@documented(summary="One release, with its manifest", responses={200: "OK", 404: "No such release"})
@requires(*READERS)
def get_release(release_id: int) -> Any:
    return jsonify(catalog.get_release(_services(), release_id).to_dict())


@api.get("/api/releases/<int:release_id>/download")
@documented(
    summary="The release's files as one tar archive (unpack it and run `dynaval release verify`)",
    responses={200: "OK", 404: "No such release", 409: "The release's files are missing"},
)
@requires(*READERS)
def download_release(release_id: int) -> Any:
    return release_download(_services(), release_id)


def release_download(services: Services, release_id: int) -> Response:
    """A release's files as one tar, streamed file by file (the API's and the dashboard's download)."""
    name, chunks = catalog.release_archive(services, release_id)  # 404 before any byte is sent
    return Response(
        chunks,
        mimetype="application/x-tar",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )
