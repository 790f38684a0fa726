"""A release's dataset card (``README.md``), made from its manifest alone.

The card is a function of the manifest: ``dynaval release verify`` makes it again and compares, and
checks the manifest's figures against the rows, so every number on the card is recomputable from
the release's own files. The YAML header is what the Hugging Face Hub and ``datasets`` read:
``configs`` (each split's files), ``dataset_info`` (the features, the label's class names, the
splits' sizes), ``task_categories``, ``annotations_creators``, ``size_categories``, ``license`` and
``pretty_name``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from dynaval.domain.images.near_copies import METHOD as IMAGE_METHOD


def _size_category(rows: int) -> str:
    for limit, name in (
        (1_000, "n<1K"),
        (10_000, "1K<n<10K"),
        (100_000, "10K<n<100K"),
        (1_000_000, "100K<n<1M"),
    ):
        if rows < limit:
            return name
    return "1M<n<10M" if rows < 10_000_000 else "10M<n<100M"


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _alpha(estimate: Mapping[str, Any] | None) -> str:
    if not estimate:
        return "n/a"
    if estimate.get("alpha") is None:
        return f"undefined ({estimate.get('undefined_reason') or 'no pairable votes'})"
    ci = estimate.get("ci95")
    interval = f" (95% CI {_fmt(ci[0])} to {_fmt(ci[1])})" if ci else " (no CI: too few items)"
    return _fmt(estimate["alpha"]) + interval


def header(manifest: Mapping[str, Any]) -> dict[str, Any]:
    splits = manifest["splits"]
    total = sum(s["rows"] for s in splits.values())
    return {
        "pretty_name": manifest["pretty_name"],
        "license": manifest["license"],
        "language": ["en"],
        "task_categories": ["text-classification"],
        "task_ids": ["natural-language-inference"]
        if manifest["task_type"] == "nli"
        else ["sentiment-classification"]
        if manifest["task_type"] == "sentiment"
        else ["multi-class-classification"],
        "annotations_creators": ["crowdsourced"],
        "language_creators": ["crowdsourced"],
        "multilinguality": ["monolingual"],
        "source_datasets": ["original"],
        "size_categories": [_size_category(total)],
        "configs": [
            {
                "config_name": "default",
                "data_files": [{"split": name, "path": f"data/{name}-*.parquet"} for name in sorted(splits)],
            }
        ],
        "dataset_info": {
            "features": manifest["features"],
            "splits": [{"name": name, "num_examples": splits[name]["rows"]} for name in sorted(splits)],
        },
    }


def _near_duplicates(section: Mapping[str, Any] | None) -> list[str]:
    """The card's "Near-duplicates" section (none for a release built before the check)."""
    if not section:
        return []
    rule = section["rule"]
    across = section["across_splits"]
    earlier = section["earlier_tests"]
    checked = earlier["releases"]
    names = ", ".join(f"{r['name']} {r['version']} ({r['test_rows']} test rows)" for r in checked)
    semantic = rule.get("semantic")
    if semantic and semantic.get("checked"):
        semantic_line = (
            f"They are also near-duplicates when, for every input field, the cosine of their MiniLM "
            f"embeddings ({semantic['encoder']}) is at least {_fmt(semantic['threshold'], 2)} (semantic: "
            "the same thing said in other words)."
        )
    elif semantic:
        semantic_line = f"The semantic check (MiniLM embeddings) did not run: {semantic.get('why', 'off')}."
    else:
        semantic_line = "The check was lexical only."
    if rule.get("method") == IMAGE_METHOD:
        definition = (
            f"Two images are near-copies when their perceptual hashes ({rule['hash_bits']} bits, a DCT "
            "hash of the image moved so that its ink's centre of mass is in the middle) differ in at "
            f"most {rule['threshold']} bits (perceptual; the same picture is 0 bits apart): a drawing "
            "shifted by a pixel or two, or re-encoded, is one. Near-copies are kept in one kind of "
            "split, like a shared image; one that would cross, or that is near an earlier release's "
            "test example, is withheld."
        )
    else:
        definition = (
            f"Two examples are near-duplicates when, for every input field, the Jaccard similarity of "
            f"their {rule['shingle']}-word shingles (after NFKC, case folding and whitespace folding) is "
            f"at least {_fmt(rule['threshold'], 2)} (MinHash LSH, {rule['num_perm']} permutations, each "
            f"candidate confirmed exactly; lexical). {semantic_line} Near-duplicates are kept in one kind "
            "of split, like shared texts; one that would cross, or that is near an earlier release's test "
            "example, is withheld."
        )
    lines = [
        "## Near-duplicates",
        "",
        definition,
        "",
        f"- Pairs across splits: {across['pairs']} (`dynaval release verify` recomputes them from the "
        "files, and fails on any).",
    ]
    lines += [
        f"  - {p['example_id']} ({p['split']}) and {p['other_id']} ({p['other_split']}): "
        f"{p.get('kind', 'lexical')}, similarity {_fmt(p['similarity'], 4)}"
        for p in across["listed"]
    ]
    lines.append(
        f"- Earlier releases' test splits checked: {names or 'none'}; train examples near one of their "
        f"test examples: {earlier['pairs']}."
    )
    lines += [
        f"  - {p['example_id']} ({p['split']}) and {p['earlier_id']} ({p['earlier_release']}, "
        f"{p['earlier_split']}): {p.get('kind', 'lexical')}, similarity {_fmt(p['similarity'], 4)}"
        for p in earlier["listed"]
    ]
    lines += [f"- Withheld as near-duplicates: {section['withheld']}.", ""]
    return lines


def render_card(manifest: Mapping[str, Any]) -> str:
    """The card's text, worded as release format 1 words it. ``verify`` makes it again and compares
    line by line, so its wording belongs to the format
    (:data:`~dynaval.domain.releases.release.RELEASE_FORMAT`):
    a new wording is a new format, and this one stays for the releases already made."""
    meta = yaml.safe_dump(header(manifest), sort_keys=False, allow_unicode=True, width=1000)
    rule = manifest["split_rule"]
    fields = ", ".join(f"`{f}`" for f in manifest["fields"])
    labels = ", ".join(f"`{label}`" for label in manifest["labels"])
    lines = [
        "---",
        meta.rstrip(),
        "---",
        "",
        f"# {manifest['pretty_name']}",
        "",
        f"Examples of the `{manifest['task_type']}` task written to fool a model, validated by several "
        f"annotators, built by dynaval {manifest['dynaval_version']} on {manifest['created_at']}. "
        f"Inputs: {fields}. Labels: {labels}. Content hash: `{manifest['content_hash']}`.",
        "",
    ]
    parent = manifest.get("parent")
    if parent:
        lines += [
            f"It extends release {parent['version']} (`{parent['content_hash']}`): that release's splits "
            "are here unchanged, with the new rounds' splits beside them.",
            "",
        ]
    lines += [
        "## How the examples were collected",
        "",
        "Writers wrote examples, each with the label they hold to be true, against the round's model "
        "(the model in the loop). An example *fooled* the model when the model's prediction was not the "
        "writer's label; the writer saw the model's answer at once. Fooled examples went to validation.",
        "",
        "| round | split suffix | name | model | model hash |",
        "|---|---|---|---|---|",
    ]
    for r in manifest["rounds"]:
        lines.append(
            f"| {r['id']} | `_r{r['index']}` | {r['name']} | {r['model']['name']} | `{r['model']['hash']}` |"
        )
    lines += [
        "",
        "## How they were validated",
        "",
        "Each fooled example went, blind, to annotators in Label Studio: they saw the inputs, never the "
        "writer's label, the writer's rationale or the model's answer. The rule (per round, below) asked "
        "for `min_votes` votes first and, on disagreement, for more, one at a time, up to `max_votes` "
        "(adaptive overlap); an example was accepted when the majority agreed with the writer with at "
        "least `accept_share` of the votes, flagged for a lead after `flag_votes` flags, rejected "
        "otherwise. A lead could override a decision, with a logged reason (the row's `override`). "
        "Annotators whose accuracy on gold items fell below the round's bar were excluded: their votes "
        "are in the rows with `counted: false`. A writer who also annotated never had their own vote "
        "counted, and it is not in the rows.",
        "",
        "| round | rule version | min votes | max votes | accept share | flag votes |",
        "|---|---|---|---|---|---|",
    ]
    for r in manifest["rounds"]:
        p = r["policy"]
        lines.append(
            f"| {r['id']} | {r['rule_version']} | {p.get('min_votes')} | {p.get('max_votes')} | "
            f"{_fmt(p.get('accept_share'))} | {p.get('flag_votes')} |"
        )
    lines += [
        "",
        "## Agreement",
        "",
        "Krippendorff's alpha (nominal) per round. *Released* is over the counted votes of this release's "
        f"rows (95% CI: {rule.get('alpha_resamples', 1000)} bootstrap resamples of the items, seed "
        f"{rule['seed']}), recomputable from the files. *All validated* is over every validated "
        "example of the round, as the service computed it when the release was built.",
        "",
        "| round | released rows | counted votes | alpha, released | alpha, all validated |",
        "|---|---|---|---|---|",
    ]
    for r in manifest["rounds"]:
        released = r["released"]
        lines.append(
            f"| {r['id']} | {released['rows']} | {released['votes']} | {_alpha(released['alpha'])} | "
            f"{_alpha(r.get('alpha_all_validated'))} |"
        )
    lines += [
        "",
        "## Counts",
        "",
        "Per round, as the service counted them when the round was frozen. MER: fooled / collected. "
        "VMER: accepted fooled / collected (unvalidated examples never count as verified).",
        "",
        "| round | collected | fooled | accepted | rejected | flagged | unvalidated | MER | VMER |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in manifest["rounds"]:
        c = r["counts"]
        lines.append(
            f"| {r['id']} | {c['collected']} | {c['fooled']} | {c['accepted']} | {c['rejected']} | "
            f"{c['flagged']} | {c['unvalidated']} | {_fmt(r['mer'])} | {_fmt(r['vmer'])} |"
        )
    withheld = manifest["withheld"]
    lines += [
        "",
        "## Splits",
        "",
        "Splits are per round, named as ANLI's: `train_r1`, `dev_r1`, `test_r1`, `train_r2`, ... "
        "They are writer-disjoint and sticky: each writer is in exactly one of train, dev and test, in "
        "every round and every later release. No text is in two kinds of split (compared after NFKC "
        "normalisation, case folding and whitespace folding), nor, for a task with several inputs, "
        "its first input. Dev and test hold only examples that at least "
        f"{rule['min_agreeing_validators']} counted validators labelled as the writer did. New writers "
        f"are assigned by scikit-learn's `StratifiedGroupKFold` (grouped by writer and shared text, "
        f"stratified by label, seed {rule['seed']}), aiming at train/dev/test shares of "
        + "/".join(_fmt(rule["shares"][kind], 2) for kind in ("train", "dev", "test"))
        + " "
        "of writers"
        + (", with dev and test balanced by label x model prediction" if rule["balance_dev_test"] else "")
        + ".",
        "",
        "| split | rows | writers | " + " | ".join(manifest["labels"]) + " |",
        "|---|---|---|" + "---|" * len(manifest["labels"]),
    ]
    for name, s in sorted(manifest["splits"].items()):
        counts = " | ".join(str(s["label_counts"][label]) for label in manifest["labels"])
        lines.append(f"| `{name}` | {s['rows']} | {s['writers']} | {counts} |")
    reached = manifest["shares_reached"]
    lines += [
        "",
        "Shares reached (of this release's writers and rows): "
        + "; ".join(
            f"{kind} {reached[kind]['writers']} writers ({_fmt(reached[kind]['writer_share'], 2)}), "
            f"{reached[kind]['examples']} rows ({_fmt(reached[kind]['example_share'], 2)})"
            for kind in ("train", "dev", "test")
        )
        + ".",
        "",
        f"Withheld: {withheld['count']} accepted examples are not in any split"
        + (
            " (" + "; ".join(f"{n}: {reason}" for reason, n in sorted(withheld["by_reason"].items())) + ")"
            if withheld["count"]
            else ""
        )
        + "; their ids are in `manifest.json`.",
        "",
    ]
    lines += _near_duplicates(manifest.get("near_duplicates"))
    lines += [
        "## Known limitations",
        "",
        "- Examples were chosen to fool one model; they are not a sample of natural text, and their "
        "label distribution follows what fooled the model.",
        "- The label is the writer's, confirmed by the validators; validators may share blind spots.",
        "- Rounds with few writers reach the target shares only roughly: see the shares reached above.",
        "- Writers and annotators are pseudonymous (HMAC with the service's secret): ids are stable "
        "within and across releases of one service, and carry no identity.",
        "",
        "## Usage",
        "",
        "- Never train on a dev or test split; report results per round (`test_r1`, `test_r2`, ...), "
        "as ANLI asks.",
        '- Load it with `datasets.load_dataset("<this directory>")`; check it with '
        "`dynaval release verify <this directory>` (offline).",
        f"- License: {manifest['license']}.",
        "",
    ]
    return "\n".join(lines)
