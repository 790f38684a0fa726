"""``GET /images/<sha256>.png?expires=…&signature=…``: a stored image, to whoever holds its signed URL
(Label Studio's annotators, whose browsers carry no dynaval token; the writers' page and the
dashboard's thumbnails). A wrong, expired or forged link answers 404 like an image never stored:
nothing tells them apart, and there is no listing."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, request

from dynaval.entrypoints.api.openapi import documented
from dynaval.service_layer.images import stored_images
from dynaval.service_layer.services import Services

images = Blueprint("images", __name__)

CACHE_FOR_S = 3600


@images.get("/images/<sha256>.png")
@documented(
    summary="A stored image, by its signed URL (no token: the signature is the credential)",
    responses={200: "The image (PNG)", 404: "No image at this link: wrong, expired or forged"},
    query={
        "expires": {"type": "integer", "description": "When the link expires (Unix seconds)."},
        "signature": {"type": "string", "description": "The link's HMAC-SHA256 signature."},
    },
)
def signed_image(sha256: str) -> Any:
    services: Services = current_app.extensions["dynaval"]
    png = stored_images.signed_image(
        services.images,
        services.settings,
        sha256,
        expires=request.args.get("expires", ""),
        signature=request.args.get("signature", ""),
    )
    response = Response(png, mimetype="image/png")
    # Label Studio shows it from another origin, and may read it into a canvas (CORS): the link is
    # the credential, so any origin may read what it names.
    response.headers["Cross-Origin-Resource-Policy"] = "cross-origin"
    response.headers["Access-Control-Allow-Origin"] = "*"
    return response
