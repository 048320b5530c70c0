"""What a server shares among its loaded models: the response cache, the rate limiter and
the deferral of loop work from executions that ran on a BLS caller's thread.

Created once per server (``server.py``) and handed to every ``Model`` through the model
manager, never a module global, so two servers in one process stay apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pytriton_core.inference.response_cache import ResponseCache
from pytriton_core.runtime.deferral import LoopDeferral
from pytriton_core.scheduling.rate_limiter import RateLimiter


@dataclass(frozen=True)
class ServerServices:
    # --cache-config: None when the server has no cache (a model's response_cache then
    # does nothing, as in Triton).
    response_cache: ResponseCache | None = None
    # --rate-limit=execution_count: None when rate limiting is off.
    rate_limiter: RateLimiter | None = None
    deferral: LoopDeferral = field(default_factory=LoopDeferral)
