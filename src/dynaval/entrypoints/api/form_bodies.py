"""A candidate as a ``multipart/form-data`` body (an image sent as a file), read into the same shape
as its JSON body, so that one request model checks both: a file part is an input (named ``image``
or ``inputs.image``), sent on as the bytes of a data URL; a text part named ``inputs.<field>`` is
an input text; any other text part (``writer_label``, ``writer_id``, ``rationale``) is the body
field of its name."""

from __future__ import annotations

import base64

from flask import request

from dynaval.domain.errors import InvalidInput

INPUTS_PREFIX = "inputs."
JPEG_TYPES = ("image/jpeg", "image/jpg", "image/pjpeg")


def is_form() -> bool:
    return request.mimetype == "multipart/form-data"


def form_payload() -> dict[str, object]:
    """The form's parts as a JSON body's fields (Werkzeug has refused a body over the limit, 413)."""
    inputs: dict[str, object] = {}
    payload: dict[str, object] = {}
    for name in request.form:
        values = request.form.getlist(name)
        if len(values) != 1:
            raise InvalidInput("is given more than once", field=name)
        if name.startswith(INPUTS_PREFIX):
            inputs[name[len(INPUTS_PREFIX) :]] = values[0]
        else:
            payload[name] = values[0]
    for name in request.files:
        files = request.files.getlist(name)
        if len(files) != 1:
            raise InvalidInput("is given more than once: one file per input", field=name)
        field = name[len(INPUTS_PREFIX) :] if name.startswith(INPUTS_PREFIX) else name
        if field in inputs:
            raise InvalidInput("is given both as a file and as text", field=f"inputs.{field}")
        data = files[0].read()
        # The declared type says nothing for sure: decoding the bytes decides what they are.
        media_type = "image/jpeg" if (files[0].mimetype or "").lower() in JPEG_TYPES else "image/png"
        inputs[field] = f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
    if inputs:
        payload["inputs"] = inputs
    return payload
