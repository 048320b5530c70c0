"""Sends a JPEG to the pipeline as a raw binary request and prints the top labels.

The image is made here: a photo-sized JPEG of one colour with some noise. The request body is
the JPEG itself, with ``Inference-Header-Content-Length: 0`` (a raw binary request, which
Triton accepts for a model with one input); the answer is Triton's binary response, read
with tritonclient.

    python examples/pipeline/client.py --model pipeline_ensemble --colour red
    python examples/pipeline/client.py --model pipeline_bls --colour blue --url localhost:8000
"""

from __future__ import annotations

import argparse
import io
import sys
import urllib.request

import numpy as np
import tritonclient.http as httpclient
from PIL import Image

COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 170, 50),
    "blue": (30, 50, 220),
    "yellow": (240, 225, 30),
    "cyan": (30, 215, 225),
    "magenta": (215, 30, 215),
    "orange": (250, 140, 15),
    "white": (245, 245, 245),
    "gray": (128, 128, 128),
    "black": (10, 10, 10),
}


def make_jpeg(colour: str, seed: int = 0) -> bytes:
    """A 320x240 JPEG of ``colour`` with a little noise."""
    rng = np.random.default_rng(seed)
    pixels = np.empty((240, 320, 3), np.float32)
    pixels[:] = COLOURS[colour]
    pixels += rng.normal(0, 12, pixels.shape)
    image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
    encoded = io.BytesIO()
    image.save(encoded, format="JPEG", quality=90)
    return encoded.getvalue()


def classify(url: str, model: str, jpeg: bytes) -> list[tuple[str, float]]:
    """The pipeline's top labels and scores for ``jpeg``."""
    request = urllib.request.Request(
        f"http://{url}/v2/models/{model}/infer",
        data=jpeg,
        headers={
            "Inference-Header-Content-Length": "0",
            "Content-Type": "application/octet-stream",
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        header_length = answer.headers.get("Inference-Header-Content-Length")
        body = answer.read()
    result = httpclient.InferResult.from_response_body(
        body, header_length=int(header_length) if header_length else None
    )
    labels = [label.decode() for label in result.as_numpy("LABELS")]
    return list(zip(labels, result.as_numpy("SCORES").tolist(), strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="localhost:8000", help="host:port of the HTTP endpoint")
    parser.add_argument("--model", default="pipeline_ensemble")
    parser.add_argument("--colour", default="red", choices=sorted(COLOURS))
    parser.add_argument("--image", help="send this image file instead of making one")
    args = parser.parse_args()
    if args.image:
        with open(args.image, "rb") as image:
            jpeg = image.read()
    else:
        jpeg = make_jpeg(args.colour)
    for label, score in classify(args.url, args.model, jpeg):
        print(f"{label:8s} {score:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
