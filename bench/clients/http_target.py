"""Where an HTTP load generator sends its requests, and a single checked request to it."""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from pathlib import Path

from bench.payloads import MODEL_NAME, HttpBody, check_http_response


@dataclass(frozen=True)
class HttpTarget:
    host: str
    port: int
    payload: HttpBody
    body_file: Path  # the payload's bytes on disk, for tools that read a file

    @property
    def path(self) -> str:
        return f"/v2/models/{MODEL_NAME}/infer"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path}"


def verify(target: HttpTarget, timeout_s: float = 120.0) -> str | None:
    """Send the body once; None when the answer is right, else what is wrong with it."""
    connection = http.client.HTTPConnection(target.host, target.port, timeout=timeout_s)
    try:
        connection.request(
            "POST", target.path, body=target.payload.body, headers=target.payload.headers
        )
        response = connection.getresponse()
        body = response.read()
        return check_http_response(
            target.payload, response.status, dict(response.getheaders()), body
        )
    except OSError as error:
        return f"request failed: {error}"
    finally:
        connection.close()
