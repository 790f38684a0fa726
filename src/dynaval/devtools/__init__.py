"""Development tools: a real Label Studio server for the test suite and the demo."""

from __future__ import annotations

from dynaval.devtools.label_studio_server import Annotator, LabelStudioServer, LabelStudioServerError

__all__ = ["Annotator", "LabelStudioServer", "LabelStudioServerError"]
