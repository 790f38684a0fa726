"""A digit drawn on the writers' page, in a real headless Chromium, against the live service, a
real Label Studio and the default digits model.

The writer draws strokes with the mouse on the canvas and sees the model's guess, with every
digit's probability as a bar, change as they draw (the live guess); what the model reads (the
drawing at 28x28 grey) is beside the pad; a finger's tap draws, an uploaded file replaces the
drawing and is answered too; undo and clear work; they pick the true digit, submit,
and find the drawing in "My examples" as a thumbnail that loads. Then an annotator opens the
Label Studio task as they would, in the browser, and the image is there (loaded from the service by
its signed URL, with no dynaval token). The page breaks no rule of its Content-Security-Policy.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.test_writer_page import pick_round, shoot, sign_in, watch
from tests.fixtures.service import WRITER_TOKEN, LiveService, running_service
from tests.support.drawings import draw_digit, png_bytes
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.labelstudio, pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]

DIGITS = [str(d) for d in range(10)]
# Strokes in the pad's own 280x280 coordinates.
ONE = [[(150, 40), (150, 245)]]
ZERO = [[(140, 40), (85, 80), (75, 140), (90, 210), (140, 245), (195, 205), (210, 140), (195, 75), (140, 40)]]


@pytest.fixture
def digits_service(
    database_url: str, tmp_path: Path, label_studio_server: Any, tiny_model_dir: Path
) -> Iterator[LiveService]:
    with running_service(database_url, tmp_path / "data", label_studio_server, tiny_model_dir) as live:
        yield live


def draw(page: Page, strokes: list[list[tuple[int, int]]]) -> None:
    """Draw ``strokes`` with the mouse on the pad (its coordinates scaled to the pad's size on screen)."""
    box = page.get_by_test_id("pad").bounding_box()
    assert box is not None
    scale = box["width"] / 280
    for stroke in strokes:
        x, y = stroke[0]
        page.mouse.move(box["x"] + x * scale, box["y"] + y * scale)
        page.mouse.down()
        for x, y in stroke[1:]:
            page.mouse.move(box["x"] + x * scale, box["y"] + y * scale, steps=6)
        page.mouse.up()


def guess(page: Page) -> str:
    """The model's current guess, once it has answered the drawing as it is now."""
    expect(page.get_by_test_id("answer")).to_be_visible()
    expect(page.get_by_test_id("answer-stale")).to_be_hidden()
    predicted = page.locator('[data-testid^="bar-"].predicted')
    expect(predicted).to_have_count(1)
    return str(predicted.get_attribute("data-testid")).removeprefix("bar-")


def ink(page: Page) -> int:
    """How many of the model input's pixels have ink (the preview canvas, 28x28)."""
    return int(
        page.evaluate(
            """() => {
              const c = document.querySelector('[data-testid="model-input"]');
              const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
              let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] > 40) n++;
              return n;
            }"""
        )
    )


def test_a_drawn_digit_is_guessed_live_submitted_and_shown_to_an_annotator_in_label_studio(
    digits_service: LiveService,
    label_studio_server: Any,
    label_studio_annotators: list[Any],
    digits_model_dir: Path,
    browser: Browser,
    screenshot_dir: Path,
) -> None:
    made = digits_service.call(
        "POST", "/api/rounds", json={"name": "draw a digit", "task": "digits", "model": str(digits_model_dir)}
    )
    assert made.status_code == 201, made.text
    round_id = made.json()["id"]

    context = browser.new_context(viewport={"width": 1280, "height": 900}, has_touch=True)
    page = context.new_page()
    seen = watch(context, page)
    page.goto(f"{digits_service.url}/write")
    sign_in(page, WRITER_TOKEN)
    pick_round(page, round_id)
    facts = page.get_by_test_id("round-facts")
    expect(facts).to_contain_text("Reads 28\u00d728 grey images")
    assert facts.inner_text().count("Reads") == 1
    assert ink(page) == 0

    draw(page, ONE)
    assert guess(page) == "1"
    expect(page.locator('[data-testid^="bar-"]')).to_have_count(10)
    assert ink(page) > 10  # what the model reads holds the drawing
    shoot(page, screenshot_dir, "digit-one", doc="writer-digit.png")

    page.get_by_test_id("clear").click()
    assert ink(page) == 0
    box = page.get_by_test_id("pad").bounding_box()
    assert box is not None
    page.touchscreen.tap(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # a finger's dot
    wait_for("the tap to draw", lambda: ink(page) > 0, timeout_s=5)
    page.get_by_test_id("upload").set_input_files(
        files=[
            {
                "name": "seven.png",
                "mimeType": "image/png",
                "buffer": png_bytes(draw_digit("7", random.Random(3))),
            }
        ]
    )
    assert guess(page) in DIGITS and ink(page) > 10  # the file replaces the drawing, and is answered
    page.get_by_test_id("clear").click()
    assert ink(page) == 0
    draw(page, ZERO)
    assert guess(page) == "0"  # the guess changed with the drawing
    draw(page, ONE)  # a stroke across the zero...
    page.get_by_test_id("undo").click()  # ...taken back
    assert guess(page) == "0"

    # The writer says it is a 6: the model is fooled, and the drawing goes to validation.
    page.get_by_test_id("label-6").check()
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("verdict")).to_contain_text("you fooled the model")
    assert ink(page) == 0  # the pad is cleared for the next drawing
    item = page.get_by_test_id("mine-item").first
    expect(item).to_be_visible()
    thumbnail = item.get_by_test_id("mine-thumbnail")
    expect(thumbnail).to_be_visible()
    wait_for(
        "the thumbnail to load",
        lambda: bool(thumbnail.evaluate("img => img.complete && img.naturalWidth > 0")),
        timeout_s=10,
    )
    assert seen["outside"] == [] and seen["errors"] == [] and seen["csp"] == []
    candidate_id = item.get_attribute("data-candidate")
    context.close()

    # The task reaches Label Studio with the image's signed URL, which an annotator's browser loads.
    def task_id() -> int | None:
        body = digits_service.call("GET", f"/api/candidates/{candidate_id}").json()
        return body["label_studio_task_id"] if body["status"] == "in_validation" else None

    wait_for("the candidate in Label Studio", lambda: task_id() is not None, timeout_s=30)
    task = label_studio_server.client.tasks.get(id=task_id())
    url = task.data["image"]
    assert url.startswith(f"{digits_service.url}/images/") and "writer" not in url
    assert set(task.data) == {"candidate_id", "image"}  # blind: no writer, label or model

    annotator = label_studio_annotators[0]
    ls = browser.new_context(viewport={"width": 1280, "height": 900})
    ls_page = ls.new_page()
    ls_page.goto(f"{label_studio_server.url}/user/login/")
    ls_page.locator('input[name="email"]').fill(annotator.email)
    ls_page.locator('input[name="password"]').fill(annotator.password)
    ls_page.locator('button[type="submit"], input[type="submit"]').first.click()
    ls_page.wait_for_url(lambda u: "/user/login" not in u, timeout=30_000)
    project = made.json()["label_studio_project_id"]
    ls_page.goto(f"{label_studio_server.url}/projects/{project}/data?task={task_id()}")
    image = ls_page.locator(f'img[src^="{digits_service.url}/images/"]').first
    expect(image).to_be_attached(timeout=60_000)
    wait_for(
        "Label Studio to show the image",
        lambda: bool(image.evaluate("img => img.complete && img.naturalWidth === 28")),
        timeout_s=30,
    )
    ls_page.screenshot(path=str(screenshot_dir / "label-studio-digit.png"), full_page=True)
    ls.close()


def test_a_live_guess_answered_after_the_writer_submitted_does_not_replace_the_verdict(
    digits_service: LiveService, digits_model_dir: Path, browser: Browser
) -> None:
    """The live guess asked for a stroke the writer then took back, answered only once the drawing was
    submitted (a slow answer: held here until then), is dropped: the page keeps saying the writer
    fooled the model, and asks nothing more for the cleared pad."""
    made = digits_service.call(
        "POST", "/api/rounds", json={"name": "slow answers", "task": "digits", "model": str(digits_model_dir)}
    )
    assert made.status_code == 201, made.text
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    seen = watch(context, page)
    page.goto(f"{digits_service.url}/write")
    sign_in(page, WRITER_TOKEN)
    pick_round(page, made.json()["id"])
    expect(page.get_by_test_id("round-facts")).to_contain_text("Reads 28\u00d728 grey images")
    draw(page, ZERO)
    assert guess(page) == "0"

    held: list[Any] = []
    asked: list[str] = []

    def note(request: Any) -> None:
        if request.url.endswith("/predict"):
            asked.append(request.url)

    page.on("request", note)
    page.route("**/predict", lambda route: held.append(route))
    draw(page, ONE)  # asked about, and its answer held back...
    wait_for("the question to be asked", lambda: page.wait_for_timeout(50) or len(held) == 1, timeout_s=5)
    page.get_by_test_id("undo").click()  # ...the stroke taken back while it is on its way
    assert guess(page) == "0"
    page.get_by_test_id("label-6").check()
    page.get_by_test_id("submit").click()
    verdict = page.get_by_test_id("verdict")
    expect(verdict).to_contain_text("you fooled the model")

    with page.expect_response("**/predict"):
        held[0].continue_()
    page.unroute("**/predict")
    page.wait_for_timeout(2 * 400 + 200)  # past the next live turn
    expect(verdict).to_contain_text("you fooled the model")
    expect(page.get_by_test_id("answer")).to_be_visible()
    assert len(held) == 1 and len(asked) == 1  # nothing asked for the cleared pad
    assert seen["errors"] == [] and seen["csp"] == []
    context.close()
