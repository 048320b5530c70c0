"""What model code sees of the server running it, in one context variable: the model's folder
(``get_model_dir``), its server's custom-metric registry (``MetricFamily``), and the server's
bridge with the hook that runs (BLS and model management, ``pb_utils_server``).

One variable rather than one each: the backend runs every ``execute`` in a context made once
per instance that holds all three (``pb_utils_server.ExecuteScope``). Each part may still
be set on its own (``model_dir_context``, ``metric_registry_context``, ``server_context``):
a copy of the current value with that part replaced. A context variable, so that two servers
in one process, and each model's threads run in a copy of its context, see their own.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from pytriton_core.backends.custom_metrics import MetricRegistry
    from pytriton_core.backends.python.pb_utils_server import ServerBridge


class ModelScope(NamedTuple):
    model_dir: str | None = None
    metrics: MetricRegistry | None = None
    # The bridge BLS and model management call, and the hook running ("initialize",
    # "execute", "finalize"); None outside a hook (or on a server without one).
    server: tuple[ServerBridge, str] | None = None


# Outside model code (a tuple: never changed, only replaced).
OUTSIDE = ModelScope()
CURRENT: contextvars.ContextVar[ModelScope] = contextvars.ContextVar(
    "pytriton_core_model_scope", default=OUTSIDE
)


def set_part(**part: Any) -> contextvars.Token[ModelScope]:
    """Replace one part (or more) of the current scope; reset with the token."""
    return CURRENT.set(CURRENT.get()._replace(**part))
