"""How the semantic near-duplicate threshold was chosen: cosine distributions on data.

Encodes, with the shipped MiniLM (offline):

- the seed sets' sentences (``model_builder/seed``): every pair of sentiment sentences from
  different topics (unrelated), pairs from the same topic (one restaurant, one film: related but
  saying another thing), and every pair of NLI examples with different premises, compared as the
  rule compares them (the smaller of the premise and hypothesis cosines);
- the hand-written pairs below: paraphrases, one-word edits, a writer's small variations of one
  trick, non-ASCII edits, and NLI pairs with the same hypothesis under another premise.

It prints each distribution's quantiles and, for candidate thresholds, the share of each family at
or above it. Run: ``python benchmarks/semantic_threshold.py`` (about a minute on 2 CPU cores).
"""

from __future__ import annotations

import json
import os
import sys
import time
from importlib import resources

import numpy

PARAPHRASES = [
    ("The battery lasts two full days.", "The battery keeps going for a whole two days."),
    ("The pasta was cold and the waiter was rude.", "Our pasta arrived cold, and the server was impolite."),
    ("This film was a joy from start to finish.", "I enjoyed this movie from the first minute to the last."),
    ("The hotel room smelled of smoke.", "Our room at the hotel stank of cigarettes."),
    ("The delivery arrived two days late.", "The package came two days after it was due."),
    ("The staff were friendly and helpful.", "The employees were kind and eager to help."),
    ("The screen is too dim to read outside.", "Outdoors, the display is not bright enough to read."),
    ("I would never buy from this shop again.", "I will not be shopping at this store ever again."),
    ("The concert started an hour late.", "The show began sixty minutes behind schedule."),
    ("The soup was far too salty.", "There was way too much salt in the soup."),
    ("The laptop overheats after ten minutes.", "After ten minutes of use the notebook gets too hot."),
    ("The book's ending was a huge letdown.", "The end of the novel was very disappointing."),
    ("Check-in took almost an hour.", "It took nearly sixty minutes to check in."),
    (
        "The headphones are comfortable even after hours of use.",
        "Even after wearing them for hours, these headphones feel comfortable.",
    ),
    ("The app crashes every time I open the camera.", "Whenever I launch the camera, the app crashes."),
    ("The museum was crowded and noisy.", "The museum was packed with people and very loud."),
    ("The train was clean and on time.", "The train was punctual and spotless."),
    ("Customer service never answered my emails.", "Support did not reply to any of my emails."),
    ("The shoes fell apart after a week.", "After one week the shoes were falling to pieces."),
    ("The coffee here is the best in town.", "This place serves the best coffee in the city."),
    ("The plot was confusing and slow.", "The story was hard to follow and dragged on."),
    ("The vacuum cleaner is loud but powerful.", "This vacuum makes a lot of noise, but it cleans well."),
    (
        "The room was smaller than in the photos.",
        "The room looked bigger in the pictures than it really was.",
    ),
    ("The printer jams on every other page.", "Every second page gets stuck in the printer."),
    ("The guide was knowledgeable and funny.", "Our guide knew a lot and made us laugh."),
]

ONE_WORD_EDITS = [
    ("The battery lasts two full days, which I love.", "The battery lasts two full days, which I adore."),
    ("The pasta was cold and the waiter was rude.", "The pasta was cold and the waiter was impolite."),
    ("This film was a joy from start to finish.", "This movie was a joy from start to finish."),
    ("Our hotel room had a stunning view of the harbour.", "Our hotel room had a stunning view of the port."),
    ("The delivery arrived two days late.", "The delivery arrived three days late."),
    ("The staff were friendly and helpful.", "The staff were friendly and very helpful."),
    ("The screen is too dim to read outside.", "The screen is too dark to read outside."),
    ("I would never buy from this shop again.", "I would never buy from this store again."),
    ("The concert started an hour late.", "The concert began an hour late."),
    ("The soup was far too salty.", "The soup was much too salty."),
    ("The laptop overheats after ten minutes.", "The laptop overheats after twenty minutes."),
    ("The book's ending was a huge letdown.", "The book's ending was a massive letdown."),
    ("The app crashes every time I open the camera.", "The app freezes every time I open the camera."),
    ("The museum was crowded and noisy.", "The gallery was crowded and noisy."),
    ("The train was clean and on time.", "The bus was clean and on time."),
    ("Customer service never answered my emails.", "Customer support never answered my emails."),
    ("The shoes fell apart after a week.", "The boots fell apart after a week."),
    ("The coffee here is the best in town.", "The coffee here is the finest in town."),
    ("The plot was confusing and slow.", "The plot was confusing and dull."),
    ("The printer jams on every other page.", "The printer jams on every single page."),
    ("Not bad at all, the food was great.", "Not bad at all, the food was fine."),
    ("Honestly the worst service I have ever had.", "Honestly the worst service I have ever seen."),
]

# A writer repeating one trick (a positive sentence with a negated negative word) with small edits.
TRICK = [
    "The meal was not terrible, it was not awful, it was just not bad at all.",
    "The dinner was not terrible, it was not awful, it was just not bad at all.",
    "The meal was not horrible, it was not awful, it was just not bad at all.",
    "The meal was not terrible, it was not dreadful, it was just not bad at all.",
    "The lunch was not terrible, it was not awful, it was simply not bad at all.",
    "The meal was not terrible, not awful, just not bad at all.",
    "Our meal was not terrible, it was not awful, it was just not bad at all.",
    "The meal wasn't terrible, it wasn't awful, it was just not bad at all.",
    "The food was not terrible, it was not awful, it was just not bad at all.",
    "The meal was not terrible, it was not awful, it was really not bad at all.",
]

NON_ASCII_EDITS = [
    (
        "Le café était délicieux et le serveur très aimable.",
        "Le café était délicieux et le serveur très gentil.",
    ),
    (
        "Das Essen war köstlich, aber die Bedienung war unhöflich.",
        "Das Essen war köstlich, aber die Bedienung war unfreundlich.",
    ),
    (
        "Die Brötchen waren frisch und die Größe war perfekt.",
        "Die Brötchen waren frisch und die Größe war ideal.",
    ),
    ("这家餐厅的服务非常好，菜也很好吃。", "这家餐厅的服务非常好，菜也很美味。"),  # noqa: RUF001 (Chinese commas)
    ("このホテルの部屋はとても綺麗でした。", "このホテルの部屋はとても清潔でした。"),
    (
        "El hotel está cerca de la playa y la habitación es cómoda.",
        "El hotel está cerca de la playa y la habitación es amplia.",
    ),
]

# NLI: (premise 1, premise 2, shared hypothesis): the same hypothesis under another premise.
SAME_HYPOTHESIS = [
    (
        "Leila calls her mother every Sunday evening.",
        "The shop closes at six on weekdays.",
        "Leila's mother lives abroad.",
    ),
    (
        "The whale surfaced near the boat and dived back down.",
        "Tom painted the fence blue last summer.",
        "The whale stayed far away from the boat.",
    ),
    (
        "Nina ordered the dress in two sizes.",
        "The train to Lyon was cancelled because of snow.",
        "Nina kept the smaller dress.",
    ),
    (
        "A man is playing a guitar on stage.",
        "A woman is reading a newspaper in the park.",
        "A person is playing music.",
    ),
    (
        "The children built a snowman in the garden.",
        "The market sells fresh fish every morning.",
        "It was cold outside.",
    ),
    (
        "The committee approved the new budget on Monday.",
        "Rain flooded the underpass overnight.",
        "The budget was rejected.",
    ),
]


def seed_texts(name: str) -> list[dict[str, str]]:
    resource = resources.files("dynaval.model_builder").joinpath("seed", name)
    return [json.loads(line) for line in resource.read_text(encoding="utf-8").splitlines() if line.strip()]


def quantiles(values: numpy.ndarray) -> str:
    q = numpy.quantile(values, [0.0, 0.5, 0.9, 0.99, 0.999, 1.0])
    return "min {:.2f}  median {:.2f}  p90 {:.2f}  p99 {:.2f}  p99.9 {:.2f}  max {:.2f}".format(*q)


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from dynaval.adapters.sentence_encoder import SentenceEncoder

    encoder = SentenceEncoder()
    started = time.monotonic()

    sentiment = seed_texts("train.jsonl") + seed_texts("heldout.jsonl")
    texts = [row["text"] for row in sentiment]
    vectors = encoder.encode(texts)
    # The sentiment seed comes in topics of three lines (positive, negative, neutral), in order.
    topic = numpy.arange(len(texts)) // 3
    cos = vectors @ vectors.T
    upper = numpy.triu_indices(len(texts), k=1)
    same_topic = topic[upper[0]] == topic[upper[1]]
    unrelated = cos[upper][~same_topic]
    related = cos[upper][same_topic]

    nli = seed_texts("nli_train.jsonl") + seed_texts("nli_heldout.jsonl")
    premises = encoder.encode([row["premise"] for row in nli])
    hypotheses = encoder.encode([row["hypothesis"] for row in nli])
    pair_min = numpy.minimum(premises @ premises.T, hypotheses @ hypotheses.T)
    different_premise = numpy.array([[a["premise"] != b["premise"] for b in nli] for a in nli])
    nli_upper = numpy.triu_indices(len(nli), k=1)
    nli_unrelated = pair_min[nli_upper][different_premise[nli_upper]]
    nli_same_premise = pair_min[nli_upper][~different_premise[nli_upper]]

    def pair_cosines(pairs: list[tuple[str, str]]) -> numpy.ndarray:
        left = encoder.encode([a for a, _b in pairs])
        right = encoder.encode([b for _a, b in pairs])
        return numpy.einsum("ij,ij->i", left, right)

    paraphrase = pair_cosines(PARAPHRASES)
    edits = pair_cosines(ONE_WORD_EDITS)
    trick_vectors = encoder.encode(TRICK)
    trick = (trick_vectors[1:] @ trick_vectors[0]).astype(numpy.float32)
    non_ascii = pair_cosines(NON_ASCII_EDITS)
    same_hypothesis = numpy.array(
        [
            min(float(p1 @ p2), float(h @ h))
            for (p1, p2, h) in (
                (*encoder.encode([a, b]), encoder.encode([c])[0]) for a, b, c in SAME_HYPOTHESIS
            )
        ]
    )
    seconds = time.monotonic() - started

    families = [
        ("unrelated seed sentences (other topic)", unrelated),
        ("seed sentences, same topic", related),
        ("NLI seed pairs, other premise (min field)", nli_unrelated),
        ("NLI seed pairs, same premise (min field)", nli_same_premise),
        ("NLI same hypothesis, other premise", same_hypothesis),
        ("hand-written paraphrases", paraphrase),
        ("one-word edits", edits),
        ("small variations of one trick (vs the first)", trick),
        ("non-ASCII one-word edits", non_ascii),
    ]
    print(f"cosine distributions (all-MiniLM-L6-v2, {seconds:.0f} s to encode):")
    for name, values in families:
        print(f"  {name:<46} n={len(values):>7,}  {quantiles(numpy.asarray(values))}")
    print("\nshare at or above each threshold:")
    thresholds = (0.7, 0.75, 0.8, 0.85, 0.9)
    print("  " + " " * 46 + "".join(f"{t:>9.2f}" for t in thresholds))
    for name, values in families:
        shares = "".join(f"{float(numpy.mean(numpy.asarray(values) >= t)):>9.1%}" for t in thresholds)
        print(f"  {name:<46}{shares}")
    print("\nmost similar unrelated seed sentences:")
    order = numpy.argsort(-numpy.where(same_topic, -1.0, cos[upper]))[:5]
    for i in order:
        a, b = int(upper[0][i]), int(upper[1][i])
        print(f"  {cos[a, b]:.2f}  {texts[a]!r} / {texts[b]!r}")
    print("\nleast similar paraphrases and edits:")
    for value, (a, b) in sorted(
        zip(paraphrase.tolist() + edits.tolist(), PARAPHRASES + ONE_WORD_EDITS, strict=True)
    )[:6]:
        print(f"  {value:.2f}  {a!r} / {b!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
