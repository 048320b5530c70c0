"""The rate limiter (``--rate-limit=execution_count``) through the real tritonclient:
resources keep instances of different models from running together, priorities share the
turns, and what cannot be scheduled fails the load with Triton's words.

Each model's execution reports when it started and ended (monotonic ns of the one server
process), so the order and overlap of executions are read from the answers themselves.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server, run_real_triton
from tritonclient.utils import InferenceServerException

# OUTPUT0 = [start_ns, end_ns] of the execution; sleeps SLEEP_S.
TIMED_MODEL = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json
        params = json.loads(args["model_config"])["parameters"]
        self.sleep_s = float(params["SLEEP_S"]["string_value"])

    def execute(self, requests):
        start = time.monotonic_ns()
        time.sleep(self.sleep_s)
        end = time.monotonic_ns()
        out = np.array([start, end], np.int64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]) for _ in requests]
"""


def write_model(
    root: Path, name: str, rate_limiter: str, *, sleep_s: float = 0.02, count: int = 1
) -> None:
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(TIMED_MODEL)
    (folder / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 2 ] } ]\n'
        f'parameters {{ key: "SLEEP_S" value: {{ string_value: "{sleep_s}" }} }}\n'
        f"instance_group [ {{ kind: KIND_CPU count: {count} "
        f"rate_limiter {{ {rate_limiter} }} }} ]\n"
    )


R1 = 'resources [ { name: "R" global: true count: 1 } ]'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    root = priority_models(tmp_path_factory.mktemp("rate-limiter"))
    write_model(root, "pair", 'resources [ { name: "P" count: 2 } ]', count=2)
    write_model(root, "greedy", 'resources [ { name: "G" count: 3 } ]')
    write_model(root, "mixed", 'resources [ { name: "R" count: 1 } ]')
    with run_pytriton_server(
        root,
        *PRIORITY_FLAGS,
        "--rate-limit-resource=G:2",
        "--rate-limit-resource=P:2",
        "--model-control-mode=explicit",
        "--load-model=gate",
        "--load-model=prio1",
        "--load-model=prio2",
        "--load-model=pair",
    ) as handle:
        yield handle


def run(url: str, model: str) -> tuple[str, int, int]:
    with httpclient.InferenceServerClient(url) as client:
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.zeros(1, np.float32))
        start, end = client.infer(model, [tensor]).as_numpy("OUTPUT0").tolist()
        return model, start, end


def check_priorities(url: str) -> None:
    with concurrent.futures.ThreadPoolExecutor(max_workers=25) as pool:
        gate = pool.submit(run, url, "gate")
        # While the gate holds R, both models queue up work (each request its own batch).
        time.sleep(0.15)
        futures = [pool.submit(run, url, m) for m in ("prio1", "prio2") * 12]
        executions = sorted([gate.result(), *(f.result() for f in futures)], key=lambda e: e[1])
    # R is global with count 1: no two executions overlap, whichever model runs them.
    for before, after in itertools.pairwise(executions):
        assert before[2] <= after[1], (before, after)
    assert executions[0][0] == "gate"
    # Priority 2 gets half the turns of priority 1 while both have work waiting (Triton
    # 2.51 runs prio1, prio1, prio2, ... here).
    first = [model for model, _, _ in executions[1:13]]
    assert first.count("prio1") == 8, first


def priority_models(root: Path) -> Path:
    write_model(root, "gate", R1, sleep_s=0.4)
    write_model(root, "prio1", f"{R1} priority: 1")
    write_model(root, "prio2", f"{R1} priority: 2")
    return root


PRIORITY_FLAGS = ("--rate-limit=execution_count", "--rate-limit-resource=R:1")


@pytest.mark.real_triton
def test_priorities_as_the_real_triton_schedules_them(tmp_path: Path) -> None:
    with run_real_triton(priority_models(tmp_path), *PRIORITY_FLAGS) as triton:
        check_priorities(triton.http_url)


def test_priority_shares_the_turns_and_the_resource_is_exclusive(server: ServerHandle) -> None:
    check_priorities(server.http_url)
    with httpclient.InferenceServerClient(server.http_url) as client:
        stats = {
            m: client.get_inference_statistics(m)["model_stats"][0]["inference_stats"]
            for m in ("prio1", "prio2")
        }
    # prio2 waited longer in the queue for the same number of executions.
    assert stats["prio2"]["queue"]["ns"] > stats["prio1"]["queue"]["ns"]


def test_a_resource_for_two_instances_lets_both_run(server: ServerHandle) -> None:
    # "pair": two instances each needing both units of P, so they take turns.
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        executions = sorted(
            pool.map(lambda _: run(server.http_url, "pair"), range(6)), key=lambda e: e[1]
        )
    for before, after in itertools.pairwise(executions):
        assert before[2] <= after[1], (before, after)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            "greedy",
            'Resource count for "G" is limited to 2 which will prevent scheduling of one or '
            "more model instances, the minimum required count is 3",
        ),
        (
            "mixed",
            'Resource "R" is present as both global and device-specific resource in the model '
            "configuration.",
        ),
    ],
)
def test_resources_that_cannot_be_scheduled_fail_the_load(
    server: ServerHandle, model: str, message: str
) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        with pytest.raises(InferenceServerException) as failure:
            client.load_model(model)
        assert message in str(failure.value)
        assert client.is_model_ready("prio1")  # the others keep serving


def test_off_ignores_the_rate_limiter_config(tmp_path: Path) -> None:
    write_model(tmp_path, "greedy", 'resources [ { name: "G" count: 3 } ]')
    with (
        run_pytriton_server(tmp_path, "--rate-limit-resource=G:1") as plain,
        httpclient.InferenceServerClient(plain.http_url) as client,
    ):
        assert client.is_model_ready("greedy")
        assert run(plain.http_url, "greedy")[0] == "greedy"
