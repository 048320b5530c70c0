"""TLS on HTTP (Triton has it only on gRPC): server certificates, mutual TLS, certificates
reloaded on SIGHUP for both protocols, through the real tritonclient.http and perf_analyzer,
with certificates the tests make."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from certificates import client_context, make_certificates, server_tls_flags
from control_models import SIMPLE_CONFIG, SIMPLE_MODEL
from geventhttpclient.response import HTTPConnectionClosed
from harness import (
    ServerError,
    ServerHandle,
    find_perf_analyzer,
    run_pytriton_server,
    write_python_model,
)
from robustness import fp32_input, write_identity_model
from tritonclient.utils import InferenceServerException


def _repository(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    write_identity_model(root, "identity")
    return root


def _https_client(
    server: ServerHandle, certs: dict[str, Path], client_certificate: bool = False
) -> httpclient.InferenceServerClient:
    options = {"ca_certs": str(certs["ca"])}
    if client_certificate:
        options |= {"certfile": str(certs["client_cert"]), "keyfile": str(certs["client_key"])}
    return httpclient.InferenceServerClient(server.http_url, ssl=True, ssl_options=options)


def _infer(client: httpclient.InferenceServerClient | grpcclient.InferenceServerClient) -> None:
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    values = np.arange(5, dtype=np.float32)
    answer = client.infer("identity", [fp32_input(module, values)]).as_numpy("OUTPUT0")
    assert answer is not None and answer.tolist() == values.tolist()


def _plain_request(server: ServerHandle) -> bytes:
    host, port = server.http_url.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            return sock.recv(4096)
        except ConnectionError:
            return b""


def test_https_through_tritonclient(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    with run_pytriton_server(
        _repository(tmp_path), *server_tls_flags(certs), https=client_context(certs)
    ) as server:
        client = _https_client(server, certs)
        assert client.is_server_ready()
        _infer(client)
        client.close()
        # Plain HTTP on the TLS port gets no HTTP answer.
        assert not _plain_request(server).startswith(b"HTTP/1.1 200")
        # A client that does not trust the server's CA fails the handshake.
        other = make_certificates(tmp_path / "other")
        untrusting = _https_client(server, other)
        with pytest.raises((ssl.SSLError, InferenceServerException)):
            untrusting.is_server_live()
        untrusting.close()
        assert "Started HTTPService at 127.0.0.1" in server.log()
        assert "(SSL)" in server.log()


def _simple_as_the_examples_do(
    client: httpclient.InferenceServerClient | grpcclient.InferenceServerClient,
) -> None:
    """What Triton's simple_{http,grpc}_infer_client.py check, in our words: the sum and
    difference of two INT32 [1, 16] inputs with both outputs asked for, then statistics."""
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    second = np.full((1, 16), 3, dtype=np.int32)
    inputs = [module.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor, data in zip(inputs, (first, second), strict=True):
        tensor.set_data_from_numpy(data)
    outputs = [module.InferRequestedOutput(name) for name in ("OUTPUT0", "OUTPUT1")]
    result = client.infer("simple", inputs, outputs=outputs)
    assert np.array_equal(result.as_numpy("OUTPUT0"), first + second)
    assert np.array_equal(result.as_numpy("OUTPUT1"), first - second)
    statistics = client.get_inference_statistics(model_name="simple")
    stats = statistics["model_stats"] if isinstance(statistics, dict) else statistics.model_stats
    assert len(stats) == 1


def test_mutual_tls_over_http_and_grpc(tmp_path: Path) -> None:
    """Both protocols with client certificates at once, as Triton's simple infer examples
    connect with --ssl and their certificate options (the unchanged examples' run: the
    issue #20 note)."""
    certs = make_certificates(tmp_path / "certs")
    root = _repository(tmp_path)
    write_python_model(root, "simple", SIMPLE_CONFIG, SIMPLE_MODEL)
    flags = server_tls_flags(certs, mutual=True, grpc=True)
    with run_pytriton_server(
        root, *flags, https=client_context(certs, client_certificate=True)
    ) as server:
        client = _https_client(server, certs, client_certificate=True)
        _infer(client)
        _simple_as_the_examples_do(client)
        client.close()
        without = _https_client(server, certs)
        with pytest.raises((ssl.SSLError, OSError, HTTPConnectionClosed)):
            without.is_server_live()
        without.close()
        grpc_client = grpcclient.InferenceServerClient(
            server.grpc_url.replace("127.0.0.1", "localhost"),
            ssl=True,
            root_certificates=str(certs["ca"]),
            private_key=str(certs["client_key"]),
            certificate_chain=str(certs["client_cert"]),
        )
        _simple_as_the_examples_do(grpc_client)
        grpc_client.close()
        grpc_without = grpcclient.InferenceServerClient(
            server.grpc_url, ssl=True, root_certificates=str(certs["ca"])
        )
        with pytest.raises(InferenceServerException, match="UNAVAILABLE"):
            grpc_without.is_server_live(client_timeout=30)
        grpc_without.close()


def test_sighup_reloads_both_protocols_certificates(tmp_path: Path) -> None:
    """New certificates (of a new CA) written over the files, then SIGHUP: connections
    made afterwards see them; a connection made before keeps working."""
    live = tmp_path / "live"
    first = make_certificates(tmp_path / "first")
    shutil.copytree(tmp_path / "first", live)
    certs_live = {key: live / path.name for key, path in first.items()}
    flags = server_tls_flags(certs_live, grpc=True)
    with run_pytriton_server(_repository(tmp_path), *flags, https=client_context(first)) as server:
        before = _https_client(server, first)
        _infer(before)
        grpc_before = grpcclient.InferenceServerClient(
            server.grpc_url, ssl=True, root_certificates=str(first["ca"])
        )
        _infer(grpc_before)

        second = make_certificates(tmp_path / "second")
        for key in ("server_cert", "server_key"):
            shutil.copyfile(second[key], certs_live[key])
        server.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while "GRPC certificates reloaded" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "HTTP certificates reloaded" in server.log()
        assert "GRPC certificates reloaded" in server.log()

        after = _https_client(server, second)
        _infer(after)
        after.close()
        stale = _https_client(server, first)
        with pytest.raises((ssl.SSLError, InferenceServerException)):
            stale.is_server_live()
        stale.close()
        grpc_after = grpcclient.InferenceServerClient(
            server.grpc_url, ssl=True, root_certificates=str(second["ca"])
        )
        _infer(grpc_after)
        grpc_after.close()
        _infer(before)  # the connection made before keeps its session
        before.close()
        grpc_before.close()

        # A reload whose files do not load keeps the certificates in use.
        certs_live["server_key"].write_text("not a key")
        server.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while "not reloaded" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "HTTP certificates not reloaded, the previous ones stay" in server.log()
        still = _https_client(server, second)
        _infer(still)
        still.close()


def test_tls_without_its_files_fails_at_start(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="--http-server-cert is required"):
        with run_pytriton_server(_repository(tmp_path), "--http-use-ssl=true", timeout=30):
            pass


@pytest.mark.perf_analyzer
@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mutual"])
def test_perf_analyzer_over_https(tmp_path: Path, mutual: bool) -> None:
    perf_analyzer = find_perf_analyzer()
    if perf_analyzer is None:
        pytest.skip("perf_analyzer is not installed (tools/install-perf-analyzer.sh)")
    certs = make_certificates(tmp_path / "certs")
    flags = server_tls_flags(certs, mutual=mutual)
    with run_pytriton_server(
        _repository(tmp_path), *flags, https=client_context(certs, client_certificate=mutual)
    ) as server:
        port = server.http_url.rsplit(":", 1)[1]
        command = [
            str(perf_analyzer),
            "-m",
            "identity",
            "-i",
            "http",
            "-u",
            f"https://localhost:{port}",
            "--shape",
            "INPUT0:16",
            "--ssl-https-verify-peer=1",
            "--ssl-https-verify-host=2",
            f"--ssl-https-ca-certificates-file={certs['ca']}",
            "--measurement-mode=count_windows",
            "--measurement-request-count=50",
            "-s",
            "1000",  # a loose threshold: this checks the run over TLS, not its speed
            "-r",
            "10",
            "-f",
            str(tmp_path / "report.csv"),
        ]
        if mutual:
            command += [
                f"--ssl-https-client-certificate-file={certs['client_cert']}",
                "--ssl-https-client-certificate-type=PEM",
                f"--ssl-https-private-key-file={certs['client_key']}",
                "--ssl-https-private-key-type=PEM",
            ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=240)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "Throughput:" in result.stdout
        with httpclient.InferenceServerClient(
            server.http_url,
            ssl=True,
            ssl_options={"ca_certs": str(certs["ca"])}
            | (
                {"certfile": str(certs["client_cert"]), "keyfile": str(certs["client_key"])}
                if mutual
                else {}
            ),
        ) as client:
            stats = client.get_inference_statistics("identity")
        success = stats["model_stats"][0]["inference_stats"]["success"]["count"]
        assert success >= 50, json.dumps(stats)[:500]
