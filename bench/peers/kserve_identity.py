"""The Python peer: KServe's ``ModelServer`` serving identity_fp32 over the v2 REST protocol.

Run by bench/servers.py with the peer venv's interpreter (.cache/bench-peers/kserve):

    python kserve_identity.py --http-port 8080

It answers ``POST /v2/models/identity_fp32/infer`` like the bundled Triton model: OUTPUT0 is
INPUT0 (FP32, same shape), in binary when the request asks for binary outputs. As a KServe user
would write it: a ``kserve.Model`` whose ``predict`` takes and returns v2 ``InferRequest`` /
``InferResponse`` objects, one uvicorn worker with uvloop + httptools (KServe's defaults).
For parity with the other servers it binds to 127.0.0.1, runs without gRPC, and logs no line per
request (no access log, no latency log).
"""

from __future__ import annotations

import argparse
import logging

import uvicorn
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer

MODEL_NAME = "identity_fp32"


class IdentityFP32(Model):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.ready = True

    def predict(self, payload: InferRequest, headers=None, response_headers=None) -> InferResponse:
        data = payload.inputs[0].as_numpy()
        binary = payload.use_binary_outputs
        output = InferOutput("OUTPUT0", list(data.shape), "FP32")
        output.set_data_from_numpy(data, binary_data=binary)
        return InferResponse(
            response_id=payload.id or "",
            model_name=self.name,
            infer_outputs=[output],
            use_binary_outputs=binary,
        )


class _LoopbackConfig(uvicorn.Config):
    """KServe hard-codes host 0.0.0.0; the bench serves on loopback only."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["host"] = "127.0.0.1"
        super().__init__(*args, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http-port", type=int, required=True)
    options, _ = parser.parse_known_args()
    uvicorn.Config = _LoopbackConfig
    server = ModelServer(
        http_port=options.http_port,
        enable_grpc=False,
        enable_latency_logging=False,
        grace_period=3,
    )
    for per_request_logger in ("uvicorn.access", "kserve.trace"):
        logging.getLogger(per_request_logger).setLevel(logging.WARNING)
    server.start([IdentityFP32(MODEL_NAME)])


if __name__ == "__main__":
    main()
