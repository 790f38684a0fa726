"""How the image near-copy threshold was chosen: Hamming distances on drawn digits.

Draws sixty different 7s (and sixty 1s) with ``tests/support/drawings.py`` (strokes of a round
brush, each with a seed of its own), fingerprints them with the service's own adapter
(:mod:`dynaval.adapters.images.pillow_images`) and measures, with the rule's distance
(:func:`dynaval.domain.images.near_copies.distance`):

- each drawing against itself shifted by one or two pixels (six shifts; a shift that pushes ink
  off the 28x28 field cuts the drawing, and is counted apart);
- against itself re-encoded as a JPEG at quality 90 and 75, and shifted then re-encoded;
- every pair of different drawings of the same digit.

It prints each family's maximum and 95th percentile (the copies) or minimum and 1st percentile
(the different drawings), and for each candidate threshold the share of copies caught and of
different pairs wrongly matched. Run: ``python benchmarks/image_near_copies.py`` (a few seconds).
"""

from __future__ import annotations

import io
import random
import statistics
import sys
from pathlib import Path

from PIL import Image

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # for tests.support (the drawings)
    sys.path.insert(0, str(REPO_ROOT))

from tests.support.drawings import draw_digit, ink, jpeg_bytes, png_bytes, shifted  # noqa: E402

from dynaval.adapters.images.pillow_images import PillowImages  # noqa: E402
from dynaval.domain.images.image import ImageFingerprint  # noqa: E402
from dynaval.domain.images.near_copies import HASH_BITS, THRESHOLD, distance  # noqa: E402

SHIFTS = [(1, 0), (2, 0), (0, 2), (2, 2), (-2, 1), (-1, -2)]
DRAWINGS = 60


def fingerprint(codec: PillowImages, data: bytes) -> ImageFingerprint:
    with Image.open(io.BytesIO(data)) as image:
        return codec.fingerprint_png(png_bytes(image.convert("L")))


def quantile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def main() -> int:
    codec = PillowImages()
    copies: dict[str, list[int]] = {
        "shift": [],
        "jpeg 90": [],
        "jpeg 75": [],
        "shift + jpeg 90": [],
        "shift cutting ink": [],
    }
    different: list[int] = []
    for digit in ("7", "1"):
        drawings = [draw_digit(digit, random.Random(500 + i)) for i in range(DRAWINGS)]
        prints = [fingerprint(codec, png_bytes(d)) for d in drawings]
        for drawing, own in zip(drawings, prints, strict=True):
            kept = ink(drawing)
            for s in SHIFTS:
                moved = shifted(drawing, *s)
                # A shift that pushes some ink off the field is another drawing: counted apart.
                whole = ink(moved) == kept
                family = "shift" if whole else "shift cutting ink"
                copies[family].append(distance(own, fingerprint(codec, png_bytes(moved))))
                if whole:
                    copies["shift + jpeg 90"].append(distance(own, fingerprint(codec, jpeg_bytes(moved, 90))))
            copies["jpeg 90"].append(distance(own, fingerprint(codec, jpeg_bytes(drawing, 90))))
            copies["jpeg 75"].append(distance(own, fingerprint(codec, jpeg_bytes(drawing, 75))))
        different += [distance(prints[i], prints[j]) for i in range(DRAWINGS) for j in range(i + 1, DRAWINGS)]
    print(f"bits apart, of {HASH_BITS} (the rule's threshold: {THRESHOLD})")
    for family, values in copies.items():
        worst, p95 = max(values), quantile(values, 0.95)
        print(f"  copies, {family:<18} max {worst:>3}   p95 {p95:>5.1f}   n={len(values)}")
    print(
        f"  different drawings      min {min(different):>3}   p1  {quantile(different, 0.01):>5.1f}   "
        f"median {statistics.median(different):.0f}   n={len(different)}"
    )
    everything = [v for family, values in copies.items() if family != "shift cutting ink" for v in values]
    print("threshold   copies caught (ink kept)   different pairs matched")
    for threshold in (4, 6, 8, 10, 12):
        caught = sum(v <= threshold for v in everything) / len(everything)
        wrong = sum(v <= threshold for v in different) / len(different)
        print(f"  {threshold:>3}        {caught:>6.3f}                  {wrong:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
