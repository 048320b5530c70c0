"""Fuzz the binary tensor extension: a JSON header of ``Inference-Header-Content-Length``
bytes, then the inputs' bytes (including a raw body, header length 0), decoded into numpy
views and checked against the model."""

from __future__ import annotations

import sys

import atheris
import instrumentation

with instrumentation.imports(instrumentation.HTTP_INFER_SUBJECT):
    from common import MODELS, check_http_infer, fuzz, serve

SERVICE = serve()
NAMES = sorted(MODELS)


def test_one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    model = NAMES[provider.ConsumeIntInRange(0, len(NAMES) - 1)]
    header = provider.ConsumeIntInRange(0, 4096)
    body = provider.ConsumeBytes(provider.remaining_bytes())
    check_http_infer(SERVICE, model, body, min(header, len(body)))


if __name__ == "__main__":
    fuzz(test_one_input, instrumentation.HTTP_INFER_SUBJECT)
    sys.exit(0)
