"""Drawn digits, as a writer draws them on the canvas: strokes of a round brush on a 280x280 black
field, white ink, scaled down to the 28x28 the model reads. Each digit is a few strokes through
points of a unit square, moved a little at random (``rng``), so that two drawings of one digit
differ as two people's do; a seed gives the same drawing again.

For the tests and the demo: the near-copy check's shifted and re-encoded copies, PNG and JPEG
bytes, and data URLs.
"""

from __future__ import annotations

import base64
import io
import math
import random
from collections.abc import Sequence

import numpy
from PIL import Image, ImageChops, ImageDraw

CANVAS = 280
SIDE = 28

Stroke = Sequence[tuple[float, float]]


def _arc(
    cx: float, cy: float, rx: float, ry: float, start: float, end: float, steps: int = 14
) -> list[tuple[float, float]]:
    return [
        (cx + rx * math.cos(math.radians(start + (end - start) * i / steps)),
         cy + ry * math.sin(math.radians(start + (end - start) * i / steps)))
        for i in range(steps + 1)
    ]  # fmt: skip


STROKES: dict[str, list[Stroke]] = {
    "0": [_arc(0.5, 0.5, 0.28, 0.38, 0, 360)],
    "1": [[(0.38, 0.25), (0.52, 0.12), (0.52, 0.88)]],
    "2": [[*_arc(0.5, 0.33, 0.25, 0.2, 200, 360), (0.7, 0.45), (0.28, 0.86), (0.76, 0.86)]],
    "3": [_arc(0.48, 0.31, 0.24, 0.19, 200, 450), _arc(0.48, 0.68, 0.27, 0.2, 270, 520)],
    "4": [[(0.62, 0.88), (0.62, 0.12), (0.24, 0.62), (0.8, 0.62)]],
    "5": [[(0.72, 0.14), (0.32, 0.14), (0.3, 0.46)], _arc(0.48, 0.64, 0.26, 0.22, 230, 500)],
    "6": [[(0.66, 0.14), *_arc(0.5, 0.64, 0.24, 0.24, 200, 560)]],
    "7": [[(0.24, 0.14), (0.76, 0.14), (0.42, 0.88)]],
    "8": [_arc(0.5, 0.3, 0.2, 0.17, 90, 450), _arc(0.5, 0.67, 0.25, 0.21, 270, 630)],
    "9": [[*_arc(0.48, 0.34, 0.22, 0.2, 0, 360), (0.7, 0.34), (0.62, 0.88)]],
}


def draw_digit(
    digit: str | int, rng: random.Random, *, jitter: float = 0.06, side: int = SIDE
) -> Image.Image:
    """A drawing of ``digit`` (grey, ``side`` pixels square, white on black)."""
    field = Image.new("L", (CANVAS, CANVAS), 0)
    pen = ImageDraw.Draw(field)
    width = rng.randint(18, 28)
    scale, dx, dy = rng.uniform(0.85, 1.05), rng.uniform(-0.04, 0.04), rng.uniform(-0.04, 0.04)
    slant = rng.uniform(-0.15, 0.15)
    for stroke in STROKES[str(digit)]:
        points = []
        for x, y in stroke:
            x = 0.5 + (x - 0.5) * scale + dx + slant * (0.5 - y) + rng.uniform(-jitter, jitter)
            y = 0.5 + (y - 0.5) * scale + dy + rng.uniform(-jitter, jitter)
            points.append((x * CANVAS, y * CANVAS))
        pen.line(points, fill=255, width=width, joint="curve")
        for x, y in (points[0], points[-1]):  # round caps, as a brush leaves
            pen.ellipse((x - width / 2, y - width / 2, x + width / 2, y + width / 2), fill=255)
    return field.resize((side, side), Image.Resampling.BOX)


def shifted(image: Image.Image, dx: int, dy: int) -> Image.Image:
    """The drawing moved by whole pixels (what moves out is lost, black comes in)."""
    moved = Image.new(image.mode, image.size, 0)
    moved.paste(image, (dx, dy))
    return moved


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def jpeg_bytes(image: Image.Image, quality: int = 90) -> bytes:
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def same_pixels(a: Image.Image | bytes, b: Image.Image | bytes) -> bool:
    """Whether two images (or image files) hold the same pixels, in the same mode."""
    first = Image.open(io.BytesIO(a)) if isinstance(a, bytes) else a
    second = Image.open(io.BytesIO(b)) if isinstance(b, bytes) else b
    return (
        first.size == second.size
        and first.mode == second.mode
        and ImageChops.difference(first.convert("RGBA"), second.convert("RGBA")).getbbox() is None
    )


def ink(image: Image.Image) -> int:
    """The sum of a grey drawing's pixels: what a shift off the field loses."""
    return int(numpy.asarray(image.convert("L"), dtype=numpy.int64).sum())
