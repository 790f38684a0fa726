"""``dynaval models``, ``dynaval suite``, ``dynaval evaluate`` and ``dynaval gate``: the regression
suite, the model catalog and the release gate (see docs/regression.md)."""

from __future__ import annotations

import argparse
import json
from contextlib import closing
from pathlib import Path
from typing import Any

from dynaval.entrypoints.cli.common import CommandError, StepBars, open_services, operator_name

EXIT_GATE_FAILED = 1


def _pct(figure: dict[str, Any]) -> str:
    if figure["accuracy"] is None:
        return "-"
    ci = figure["ci95"]
    interval = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
    return f"{figure['accuracy']:.3f}{interval} ({figure['correct']}/{figure['cases']})"


def _absolute(path: str) -> str:
    """A folder named on the command line, relative to the working directory."""
    return str(Path(path).expanduser().resolve())


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))


def cmd_models_register(args: argparse.Namespace) -> int:
    from dynaval.service_layer.regression.model_catalog import register_model

    with closing(open_services()) as services:
        model = register_model(services, _absolute(args.directory), name=args.name)
    print(model.hash)
    return 0


def cmd_models_ship(args: argparse.Namespace) -> int:
    from dynaval.service_layer.regression.model_catalog import ship_model

    with closing(open_services()) as services:
        model = ship_model(services, args.model, by=operator_name(), reason=args.reason)
    print(f"shipped {model.hash} ({model.name})")
    return 0


def cmd_models_list(args: argparse.Namespace) -> int:
    from dynaval.service_layer.regression.model_catalog import list_models

    with closing(open_services()) as services:
        models = list_models(services)
    if args.json:
        _print_json({"models": [m.to_dict() for m in models]})
        return 0
    for m in models:
        shipped = f"shipped {m.shipped_at:%Y-%m-%d} by {m.shipped_by}" if m.shipped and m.shipped_at else "-"
        print(f"{m.hash}  {m.name}  {shipped}  {m.folder}")
    if not models:
        print("no model is registered")
    return 0


def cmd_suite_list(args: argparse.Namespace) -> int:
    from dynaval.service_layer.regression.suite import list_cases, sync_suite

    with closing(open_services()) as services:
        sync_suite(services)
        cases = list_cases(services, retired=args.retired, suspect=args.suspect)
    if args.json:
        _print_json({"cases": [c.to_dict() for c in cases]})
        return 0
    for c in cases:
        marks = ",".join(m for m, on in (("suspect", c.suspect), ("confirmed", c.confirmed)) if on)
        retired = f"  retired by {c.retired_by}: {c.retired_reason}" if c.retired else ""
        text = " | ".join(c.inputs.values()).replace("\n", " ")
        print(f"{c.id}  {c.split}  {c.label}  {marks or '-'}  {text[:80]}{retired}")
    print(f"{len(cases)} cases")
    return 0


def cmd_suite_retire(args: argparse.Namespace) -> int:
    from dynaval.service_layer.regression.suite import retire_case

    with closing(open_services()) as services:
        case = retire_case(services, args.case, by=operator_name(), reason=args.reason)
    print(f"retired {case.id} ({case.split}): {case.retired_reason}")
    return 0


def cmd_suite_case(args: argparse.Namespace) -> int:
    from dynaval.service_layer.regression.suite import case_detail

    with closing(open_services()) as services:
        detail = case_detail(services, args.case)
    if args.json:
        _print_json(detail)
        return 0
    history = detail["history"]
    print(f"case {detail['id']}  {detail['split']}  label {detail['label']}  source {detail['source']}")
    print("  inputs: " + json.dumps(detail["inputs"], ensure_ascii=False))
    if detail["retired_at"]:
        print(f"  retired {detail['retired_at']} by {detail['retired_by']}: {detail['retired_reason']}")
    for key in ("first_passed", "last_passed"):
        passed = history[key]
        print(
            f"  {key.replace('_', ' ')}: " + (f"{passed['model']} at {passed['at']}" if passed else "never")
        )
    flips = history["flipped_by"]
    print(
        "  flipped right to wrong by: " + (", ".join(f"{f['model']} at {f['at']}" for f in flips) or "none")
    )
    for r in detail["results"]:
        print(
            f"  {r['evaluated_at']}  {r['model']}  {r['prediction']}  {'right' if r['correct'] else 'wrong'}"
        )
    return 0


def cmd_suite_revalidate(args: argparse.Namespace) -> int:
    from dynaval.entrypoints.api.limited_models import request_models
    from dynaval.entrypoints.api.schemas import RevalidateRequest
    from dynaval.service_layer.regression.revalidation import send_suspects_to_revalidation

    with closing(open_services()) as services:
        # The same checks as the API's body: case ids and a readable round name.
        body = request_models(services.settings).validate(
            RevalidateRequest, {"cases": args.case, "name": args.name}
        )
        sent = send_suspects_to_revalidation(
            services, case_ids=body.cases, by=operator_name(), name=body.name
        )
    if args.json:
        _print_json(sent.to_dict())
        return 0
    for round_id, cases in sent.rounds.items():
        print(f"revalidation round {round_id}: {len(cases)} case{'s' if len(cases) != 1 else ''} sent")
    if not sent.rounds:
        print("no suspect case is waiting for re-validation: nothing sent")
    print(f"{len(sent.cases)} cases sent")
    return 0


def cmd_suite_settle(args: argparse.Namespace) -> int:
    from dynaval.service_layer.regression.revalidation import settle_revalidations

    with closing(open_services()) as services:
        settled = settle_revalidations(services)
    print(
        f"confirmed {settled.confirmed}, retired {settled.retired}, unresolved {settled.unresolved}; "
        f"{settled.waiting} still waiting for their decision"
    )
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from dynaval.service_layer.regression.evaluation import evaluate

    bars = StepBars()
    with closing(open_services()) as services:
        try:
            report = evaluate(
                services, _absolute(args.model), releases=[Path(r) for r in args.release or []], progress=bars
            ).report()
        finally:
            bars.close()
    if args.json:
        _print_json(report)
        return 0
    model = report["model"]
    print(f"model {model['hash']} ({model['name']}): {report['cases']} cases in {report['seconds']:.2f} s")
    print(f"  overall: {_pct(report['overall'])}")
    for kind in ("split", "label"):
        print(f"  by {kind}: model  |  round's own model")
        for key, figures in report[f"by_{kind}"].items():
            print(f"    {key}: {_pct(figures['model'])}  |  {_pct(figures['round_model'])}")
    if report["skipped_task_types"]:
        print(f"  skipped (labels do not fit): {', '.join(report['skipped_task_types'])}")
    if report["suspects_marked"]:
        print(f"  newly suspect cases: {report['suspects_marked']} (`dynaval suite list --suspect`)")
    return 0


def cmd_gate(args: argparse.Namespace) -> int:
    from dynaval.service_layer.regression.gate import run_gate
    from dynaval.service_layer.regression.model_catalog import HASH_PREFIX

    if args.max_flips < 0:
        raise CommandError("--max-flips must be 0 or more")
    baseline = args.baseline
    if baseline is not None and not baseline.startswith(HASH_PREFIX):
        baseline = _absolute(baseline)
    with closing(open_services()) as services:
        outcome = run_gate(
            services,
            _absolute(args.candidate),
            baseline=baseline,
            max_flips=args.max_flips,
            by=operator_name(),
        )
    data = outcome.to_dict()
    if args.json:
        _print_json(data)
    else:
        result = outcome.result
        verdict = "PASS" if result.passed else "FAIL"
        print(
            f"gate {verdict}: {len(result.negative_flips)} negative flips (allowed {result.max_flips}), "
            f"{result.positive_flips} positive flips over {result.paired_cases} paired cases"
        )
        print(f"  candidate {outcome.candidate.hash}; baseline {outcome.baseline}")
        for split, figures in data["per_round"].items():
            print(
                f"  {split}: baseline {figures['baseline_accuracy']:.3f} -> candidate "
                f"{figures['candidate_accuracy']:.3f} ({figures['change']:+.3f})"
            )
        test = data["mcnemar"]
        p = "n/a (no discordant pair)" if test["p_value"] is None else f"{test['p_value']:.4g}"
        print(f"  McNemar ({test['method']}): p = {p}")
        for flip in data["negative_flips"]:
            text = json.dumps(flip["inputs"], ensure_ascii=False)
            print(
                f"  flip {flip['case_id']} round {flip['round_id']} {flip['split']}: {text} label "
                f"{flip['label']}, baseline {flip['baseline_prediction']}, candidate "
                f"{flip['candidate_prediction']}"
            )
        print(f"  gate run {outcome.run_id}")
    return 0 if outcome.result.passed else EXIT_GATE_FAILED


def add_regression_commands(commands: Any) -> None:
    models = commands.add_parser("models", help="the model catalog: register, ship, list")
    model_commands = models.add_subparsers(dest="models_command", required=True, metavar="MODELS_COMMAND")
    register = model_commands.add_parser(
        "register", help="register a model folder by its content hash (prints the hash; idempotent)"
    )
    register.add_argument("directory", help="a transformers model folder")
    register.add_argument("--name", help="a name to show (default: the folder's name)")
    register.set_defaults(run=cmd_models_register)
    ship = model_commands.add_parser(
        "ship", help="mark a registered model shipped (the gate's default baseline); logged"
    )
    ship.add_argument("--model", required=True, help="the model's hash (sha256:...)")
    ship.add_argument("--reason", required=True, help="why; recorded with the model")
    ship.set_defaults(run=cmd_models_ship)
    listing = model_commands.add_parser("list", help="registered models with their shipped state")
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(run=cmd_models_list)

    suite = commands.add_parser(
        "suite", help="the regression suite: list, retire, re-validate suspects, a case's history"
    )
    suite_commands = suite.add_subparsers(dest="suite_command", required=True, metavar="SUITE_COMMAND")
    cases = suite_commands.add_parser("list", help="the suite's cases")
    cases.add_argument("--retired", action="store_true", help="the retired cases instead, with reasons")
    cases.add_argument("--suspect", action="store_true", help="only the suspect cases")
    cases.add_argument("--json", action="store_true", help="print one JSON object")
    cases.set_defaults(run=cmd_suite_list)
    retire = suite_commands.add_parser("retire", help="take a case out of the suite (audit logged)")
    retire.add_argument("--case", required=True, help="the case id (its candidate's id)")
    retire.add_argument("--reason", required=True, help="why; recorded in the audit log")
    retire.set_defaults(run=cmd_suite_retire)
    revalidate = suite_commands.add_parser(
        "revalidate",
        help="send suspect cases back to Label Studio, blind, in a new revalidation round (logged)",
        description="Send suspect cases (by default every one not yet under re-validation) to Label "
        "Studio in a new revalidation round per task type. A case the validators reject is retired "
        "automatically; one they accept is confirmed. Exit 2 on bad input.",
    )
    revalidate.add_argument(
        "--case", action="append", help="a suspect case's id (repeatable; default: every suspect case)"
    )
    revalidate.add_argument("--name", help="the rounds' name (Label Studio shows it as the project's title)")
    revalidate.add_argument("--json", action="store_true", help="print one JSON object")
    revalidate.set_defaults(run=cmd_suite_revalidate)
    settle = suite_commands.add_parser(
        "settle",
        help="retire or confirm the cases whose re-validation is decided (idempotent; the service "
        "does it too)",
    )
    settle.set_defaults(run=cmd_suite_settle)
    case = suite_commands.add_parser("case", help="a case and its history across models")
    case.add_argument("--case", required=True, help="the case id")
    case.add_argument("--json", action="store_true", help="print one JSON object")
    case.set_defaults(run=cmd_suite_case)

    evaluate = commands.add_parser(
        "evaluate",
        help="run a model over the regression suite and record every case's result",
        description="Register the model, run it over the non-retired suite (micro-batched), record each "
        "case's result, and print accuracy per round split and per label with bootstrap 95%% CIs, next to "
        "the round's own model. --release restricts it to the dev and test cases of verified release "
        "folders.",
    )
    evaluate.add_argument("--model", required=True, help="a transformers model folder")
    evaluate.add_argument("--release", action="append", help="a release folder (repeatable)")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.set_defaults(run=cmd_evaluate)

    gate = commands.add_parser(
        "gate",
        help="may a candidate model ship? exit 0 pass, 1 fail (negative flips listed), 2 bad input",
        description="Fail when the candidate gets wrong more than --max-flips cases that the baseline (a "
        "model hash or folder; by default any shipped model) got right. Positive flips, accuracy change "
        "per round and McNemar's test are reported beside it. Each run is recorded.",
    )
    gate.add_argument("--candidate", required=True, help="the candidate model folder")
    gate.add_argument(
        "--baseline", help="a registered model's hash or a model folder (default: shipped models)"
    )
    gate.add_argument("--max-flips", type=int, default=0, help="negative flips allowed (default 0)")
    gate.add_argument("--json", action="store_true", help="print one JSON object")
    gate.set_defaults(run=cmd_gate)
