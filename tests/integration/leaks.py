"""The leak check of the integration tests: after a test, the server it used holds no live
request, response or view of a client's shared-memory region, no pooled buffer handed out,
and no more shared-memory mappings than before the test (``--debug-live-objects``, which
every server of ``harness.run_pytriton_server`` has).

    pytestmark = pytest.mark.usefixtures("leak_check")   # a module whose ``server`` fixture
                                                          # is a pytriton-core server
"""

from __future__ import annotations

import json
import time
import urllib.request

from harness import ServerHandle

SETTLE_S = 30.0  # a wait, not a limit: answers are sent before their requests are dropped
MUST_BE_ZERO = ("requests", "responses", "shm_region_views", "pooled_bytes_in_use")


def live_objects(server: ServerHandle) -> dict[str, int]:
    url = f"http://{server.http_url}/v2/debug/live_objects"
    with urllib.request.urlopen(url, timeout=60) as answer:
        counts: dict[str, int] = json.loads(answer.read())
    return counts


def leftovers(counts: dict[str, int], baseline: dict[str, int]) -> dict[str, int]:
    """What ``counts`` has that it should not: any of MUST_BE_ZERO above zero, or more
    shared-memory mappings than ``baseline``."""
    left = {name: counts[name] for name in MUST_BE_ZERO if counts[name]}
    if counts["shm_mappings"] > baseline["shm_mappings"]:
        left["shm_mappings"] = counts["shm_mappings"]
    return left


def check_no_leaks(
    server: ServerHandle, baseline: dict[str, int], settle_s: float = SETTLE_S
) -> None:
    """Raise AssertionError naming what the server still holds once ``settle_s`` passed."""
    deadline = time.monotonic() + settle_s
    while True:
        counts = live_objects(server)
        left = leftovers(counts, baseline)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"left alive after the test: {left} (all counts: {counts}, before: {baseline})"
