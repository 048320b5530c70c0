"""The response cache: responses kept by a key of their request, evicted by size.

One cache per server (``--cache-config local,size=<bytes>``), shared by every model whose
config sets ``response_cache { enable: true }``. The key is a digest of the model's name and
version and of every input (name, datatype, shape and bytes, in name order), as Triton's
``TritonCache::Hash`` is, plus the names of the outputs the request asks for: a response
holds only those, so two requests that differ there must not share one. Entries are stored
in least-recently-used order; inserting past the size evicts from the cold end, as
Triton's local cache does.

Every method is called on the event loop (lookups in ``Model.submit``, inserts when a batch
is answered), so the cache needs no lock.
"""

from __future__ import annotations

import enum
import hashlib
import struct
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pytriton_core.errors import InvalidArgumentError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.tensor import DeviceTensor, Tensor
from pytriton_core.inference.tensor_data import array_to_bytes

_LENGTH = struct.Struct("<Q")
# What one output costs in an entry besides its name, datatype, dims and bytes: the four
# length fields of Triton's serialized form (name, datatype, shape, buffer).
_OUTPUT_HEADER_BYTES = 4 * _LENGTH.size


def cache_key(request: InferenceRequest, model_name: str, version: int) -> bytes | None:
    """The request's key; None when it cannot be cached (an input in GPU memory, which
    Triton's cache refuses too)."""
    digest = hashlib.blake2b(digest_size=16)
    update = digest.update

    def text(value: str) -> None:
        data = value.encode()
        update(_LENGTH.pack(len(data)))
        update(data)

    text(model_name)
    update(_LENGTH.pack(version))
    for name in sorted(request.inputs):
        tensor = request.inputs[name]
        if isinstance(tensor, DeviceTensor) and not tensor.on_host:
            return None
        text(name)
        text(tensor.datatype.wire_name)
        shape = tensor.shape
        update(_LENGTH.pack(len(shape)))
        update(struct.pack(f"<{len(shape)}q", *shape))
        data = array_to_bytes(tensor)
        update(_LENGTH.pack(memoryview(data).nbytes))
        update(data)
    outputs = request.requested_outputs
    if outputs is not None:
        update(b"\x01")
        for output in sorted(outputs):
            text(output)
    return digest.digest()


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """A response's outputs, copied out of whatever buffers the backend produced them in."""

    outputs: tuple[Tensor, ...]
    byte_size: int

    @classmethod
    def of(cls, outputs: Sequence[Tensor]) -> CacheEntry:
        copies = []
        size = 0
        for tensor in outputs:
            data = np.array(tensor.data, copy=True)
            data.flags.writeable = False
            copies.append(Tensor(tensor.name, tensor.datatype, data))
            size += (
                _OUTPUT_HEADER_BYTES
                + len(tensor.name.encode())
                + len(tensor.datatype.wire_name)
                + 8 * data.ndim
                + memoryview(array_to_bytes(copies[-1])).nbytes
            )
        return cls(tuple(copies), size)

    def tensors(self) -> list[Tensor]:
        """Fresh tensors over the entry's (read-only) data, one per output."""
        return [Tensor(t.name, t.datatype, t.data) for t in self.outputs]


@dataclass(slots=True)
class CacheCounters:
    """What the local cache reports (its ``nv_cache_*`` gauges), since the server started."""

    lookups: int = 0
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    lookup_ns: int = 0
    insert_ns: int = 0


class InsertOutcome(enum.Enum):
    """What an insert did: stored, or the key was there already (a concurrent miss of the
    same request got there first: Triton counts neither a hit nor a miss for it), or the
    entry is larger than the whole cache."""

    STORED = "stored"
    EXISTS = "exists"
    TOO_LARGE = "too large"


class ResponseCache:
    """Entries by key, least recently used first out, bounded by ``capacity_bytes``."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self.counters = CacheCounters()
        self._entries: OrderedDict[bytes, CacheEntry] = OrderedDict()

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, str]) -> ResponseCache:
        """The cache ``--cache-config`` names; only ``local`` (with its ``size``) exists."""
        if name != "local":
            raise InvalidArgumentError(
                f"unknown cache '{name}': this server provides the 'local' cache only "
                "(--cache-config local,size=<bytes>)"
            )
        unknown = sorted(set(settings) - {"size"})
        if unknown:
            raise InvalidArgumentError(
                f"Failed to initialize LocalCache: unknown setting(s) {', '.join(unknown)} "
                "(the local cache takes 'size')"
            )
        if "size" not in settings:
            raise InvalidArgumentError(
                "Failed to initialize LocalCache: config didn't contain a valid 'size' field."
            )
        try:
            size = int(settings["size"])
        except ValueError:
            size = -1
        if size < 0:
            raise InvalidArgumentError(
                f"Failed to initialize LocalCache: 'size' must be a byte count, got "
                f"'{settings['size']}'"
            )
        return cls(size)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def utilization(self) -> float:
        return self.used_bytes / self.capacity_bytes if self.capacity_bytes else 0.0

    def lookup(self, key: bytes) -> CacheEntry | None:
        start = time.monotonic_ns()
        counters = self.counters
        counters.lookups += 1
        entry = self._entries.get(key)
        if entry is None:
            counters.misses += 1
        else:
            counters.hits += 1
            self._entries.move_to_end(key)
        counters.lookup_ns += time.monotonic_ns() - start
        return entry

    def insert(self, key: bytes, outputs: Sequence[Tensor]) -> InsertOutcome:
        start = time.monotonic_ns()
        try:
            if key in self._entries:
                return InsertOutcome.EXISTS
            entry = CacheEntry.of(outputs)
            if entry.byte_size > self.capacity_bytes:
                return InsertOutcome.TOO_LARGE
            while self.used_bytes + entry.byte_size > self.capacity_bytes:
                _, evicted = self._entries.popitem(last=False)
                self.used_bytes -= evicted.byte_size
                self.counters.evictions += 1
            self._entries[key] = entry
            self.used_bytes += entry.byte_size
            return InsertOutcome.STORED
        finally:
            self.counters.insert_ns += time.monotonic_ns() - start
