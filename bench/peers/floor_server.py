"""The floor: how fast this machine answers the bench's requests when answering costs nothing.

Run by bench/servers.py with the bench venv's interpreter:

    python floor_server.py --http-port 8000 --grpc-port 8001

One process, one uvloop event loop, serving identity_fp32's requests the cheapest way each
protocol allows, so every run shows how far the servers under test are from the socket work:

- HTTP: httptools parsing, and an answer computed once per distinct request (an infer body
  with binary tensors echoes its tensor bytes after a JSON header made once per request
  header; a JSON body gets the answer made the first time it was seen). No model, no
  validation, no statistics.
- gRPC: a bare ``grpc.aio`` server with raw-bytes handlers; ``ModelInfer`` parses the message
  with protobuf and echoes its raw input contents as the output (what a server must do at
  the least), the metadata and configuration perf_analyzer asks for are answered from
  messages made at start.

Both answer like the identity model: OUTPUT0 = INPUT0, FP32, so the bench's answer check
passes. Only the paths perf_analyzer and the load generators use exist; the rest is 404.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import grpc
import httptools
import uvloop
from google.protobuf import json_format

from pytriton_core import proto

MODEL = "identity_fp32"
TENSOR = {"datatype": "FP32", "shape": [-1, -1]}
METADATA = {
    "name": MODEL,
    "versions": ["1"],
    "platform": "python",
    "inputs": [{"name": "INPUT0", **TENSOR}],
    "outputs": [{"name": "OUTPUT0", **TENSOR}],
}
CONFIG = {
    "name": MODEL,
    "backend": "python",
    "max_batch_size": 8,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": ["-1"]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": ["-1"]}],
}
SERVER = {"name": "floor", "version": "0", "extensions": ["binary_tensor_data"]}


def _http(status: int, body: bytes, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    reason = {200: "OK", 404: "Not Found"}.get(status, "Error")
    lines = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


_GET = {
    "/v2": _http(200, json.dumps(SERVER).encode()),
    "/v2/health/live": _http(200, b""),
    "/v2/health/ready": _http(200, b""),
    f"/v2/models/{MODEL}": _http(200, json.dumps(METADATA).encode()),
    f"/v2/models/{MODEL}/ready": _http(200, b""),
    f"/v2/models/{MODEL}/config": _http(200, json.dumps(CONFIG).encode()),
}
_NOT_FOUND = _http(404, b'{"error":"Not Found"}')


def _identity_header(request_header: bytes) -> bytes:
    """The JSON header answering a binary-tensor request header: OUTPUT0 = INPUT0."""
    document = json.loads(request_header)
    tensor = document["inputs"][0]
    size = tensor["parameters"]["binary_data_size"]
    answer = _identity_answer(tensor["shape"], parameters={"binary_data_size": size})
    return json.dumps(answer, separators=(",", ":")).encode()


def _identity_answer(shape: object, **output: object) -> dict[str, object]:
    """The identity model's answer document: OUTPUT0, FP32, ``shape``, and ``output``."""
    tensor = {"name": "OUTPUT0", "datatype": "FP32", "shape": shape, **output}
    return {"model_name": MODEL, "model_version": "1", "outputs": [tensor]}


def _identity_json(body: bytes) -> bytes:
    document = json.loads(body)
    tensor = document["inputs"][0]
    answer = _identity_answer(tensor["shape"], data=tensor["data"])
    return _http(
        200,
        json.dumps(answer, separators=(",", ":")).encode(),
        (("Content-Type", "application/json"),),
    )


class FloorHttp(asyncio.Protocol):
    """One connection: parse with httptools, answer from the caches."""

    def __init__(self, binary_heads: dict[bytes, bytes], json_answers: dict[bytes, bytes]) -> None:
        self._binary_heads = binary_heads
        self._json_answers = json_answers
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._header_length: int | None = None
        self._body: list[bytes] = []

    def connection_made(self, transport: Any) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            if self._transport is not None:
                self._transport.close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url, self._header_length, self._body = b"", None, []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"inference-header-content-length":
            self._header_length = int(value)

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        transport = self._transport
        if transport is None:
            return
        path = self._url.split(b"?", 1)[0].decode()
        if self._parser.get_method() == b"GET":
            transport.write(_GET.get(path, _NOT_FOUND))
            return
        if path != f"/v2/models/{MODEL}/infer":
            transport.write(_NOT_FOUND)
            return
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        if self._header_length is None:
            answer = self._json_answers.get(body)
            if answer is None:
                answer = self._json_answers[body] = _identity_json(body)
            transport.write(answer)
            return
        split = self._header_length
        request_header = body[:split]
        header = self._binary_heads.get(request_header)
        if header is None:
            header = self._binary_heads[request_header] = _identity_header(request_header)
        data = memoryview(body)[split:]
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Length: {len(header) + len(data)}\r\n"
            f"Content-Type: application/octet-stream\r\n"
            f"Inference-Header-Content-Length: {len(header)}\r\n\r\n"
        ).encode()
        transport.writelines((head, header, data))


def _grpc_handlers() -> grpc.GenericRpcHandler:
    def message(name: str, document: dict[str, Any] | None = None) -> bytes:
        instance = proto.inference(name)()
        if document:
            json_format.ParseDict(document, instance)
        return bytes(instance.SerializeToString())

    config = proto.inference("ModelConfigResponse")()
    json_format.ParseDict({"config": CONFIG}, config)
    fixed = {
        "ServerLive": message("ServerLiveResponse", {"live": True}),
        "ServerReady": message("ServerReadyResponse", {"ready": True}),
        "ModelReady": message("ModelReadyResponse", {"ready": True}),
        "ServerMetadata": message("ServerMetadataResponse", SERVER),
        "ModelMetadata": message("ModelMetadataResponse", METADATA),
        "ModelConfig": bytes(config.SerializeToString()),
    }
    request_class: Any = proto.inference("ModelInferRequest")
    response_class: Any = proto.inference("ModelInferResponse")

    def answer(payload: bytes) -> Any:
        async def call(request: bytes, context: Any) -> bytes:
            return payload

        return grpc.unary_unary_rpc_method_handler(call)

    async def model_infer(data: bytes, context: Any) -> bytes:
        request = request_class.FromString(data)
        response = response_class(model_name=MODEL, model_version="1", id=request.id)
        source = request.inputs[0]
        response.outputs.add(name="OUTPUT0", datatype="FP32", shape=source.shape)
        response.raw_output_contents.extend(request.raw_input_contents[:1])
        return bytes(response.SerializeToString())

    handlers = {name: answer(payload) for name, payload in fixed.items()}
    handlers["ModelInfer"] = grpc.unary_unary_rpc_method_handler(model_infer)
    return grpc.method_handlers_generic_handler(proto.GRPC_INFERENCE_SERVICE.full_name, handlers)


async def serve(http_port: int, grpc_port: int) -> None:
    loop = asyncio.get_running_loop()
    binary_heads: dict[bytes, bytes] = {}
    json_answers: dict[bytes, bytes] = {}
    server = await loop.create_server(
        lambda: FloorHttp(binary_heads, json_answers), "127.0.0.1", http_port, backlog=1024
    )
    options = [
        ("grpc.max_send_message_length", 2**31 - 1),
        ("grpc.max_receive_message_length", 2**31 - 1),
    ]
    rpc = grpc.aio.server(options=options)
    rpc.add_generic_rpc_handlers((_grpc_handlers(),))
    rpc.add_insecure_port(f"127.0.0.1:{grpc_port}")
    await rpc.start()
    print(f"floor serving HTTP on {http_port}, gRPC on {grpc_port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        server.close()
        await rpc.stop(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    args = parser.parse_args()
    uvloop.install()
    try:
        asyncio.run(serve(args.http_port, args.grpc_port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
