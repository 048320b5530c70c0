"""The rate limiter (``--rate-limit=execution_count``): which model instance runs next.

Triton's rate limiter (core's ``rate_limiter.cc``) as the instances of this server meet it:
every scheduler hands batches to instances that pull them (``Scheduler.next_batch``), so
the limiter sits between pulling and executing. An instance holding a batch *stages*
itself (``InstanceSlot.acquire``) and blocks until it is *allocated*; it executes, then
*releases* (``InstanceSlot.release``), which frees its resources and lets the next staged
instance run. So every scheduler (default, dynamic, sequence, ensembles' steps) is rate
limited alike.

* Resources: an instance group's ``rate_limiter { resources [{name, count, global}] }``.
  A resource is per device (the instance's device) unless ``global``. An instance is
  allocated only when all its resources are free; it holds them while it executes.
  What is available defaults to the most any one instance asks for (per device);
  ``--rate-limit-resource=<name>:<count>[:<device>]`` sets it, and once any is given a
  resource it does not name is unavailable, so a model needing it fails to load (Triton's
  check and words).
* Priority: staged instances of all models are served lowest ``exec_count * priority``
  first (priority 0 counts as 1), so priority 2 gets half the turns of priority 1. As in
  Triton only the first staged instance is tried: one whose resources are busy makes the
  others wait (no overtaking). Equal priorities go in the order they staged.
* Re-staging: Triton stages an instance again inside its release when its model has work
  waiting, before it allocates the next one. Here the instance must first pull its next
  batch, so a release with work waiting leaves an *expectation* of the instance's next
  turn: no staged instance that would come after it is allocated until it stages, or for
  at most ``EXPECTATION_S`` (its work may have gone to a sibling instance).
* A request waiting here has left the scheduler's queue, so cancelling it no longer
  removes it (Triton: "cancellation is not detected once in the rate limiter queue").
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pytriton_core.config.spec import RateLimiterResource
from pytriton_core.errors import InvalidArgumentError
from pytriton_core.options import RateLimitResource

GLOBAL = -2  # the key of global resources (Triton's GLOBAL_RESOURCE_KEY)
EVERY_DEVICE = -1  # --rate-limit-resource without a device (PER_DEVICE_RESOURCE_KEY)

# device key -> resource name -> count
ResourceMap = dict[int, dict[str, int]]

# How long a released instance with work waiting keeps its turn while it pulls its batch.
EXPECTATION_S = 0.002


@dataclass(eq=False)
class InstanceSlot:
    """One model instance as the limiter knows it; its worker thread calls ``acquire``
    before each execution and ``release`` after it."""

    limiter: RateLimiter
    model: str
    instance: str
    priority: int  # >= 1
    resources: ResourceMap
    exec_count: int = 0
    _allocated: threading.Event = field(default_factory=threading.Event)

    def acquire(self) -> None:
        """Block until the limiter allocates this instance its resources."""
        limiter = self.limiter
        limiter._stage(self)
        while not self._allocated.wait(EXPECTATION_S):
            limiter._expire_expectations()
        self._allocated.clear()

    def release(self, more_work: bool) -> None:
        """After an execution; ``more_work``: the model has requests waiting, so this
        instance will stage again as soon as it has pulled them."""
        self.limiter._release(self, more_work)


class RateLimiter:
    """One per server, shared by every model's instances (priorities compare across
    models)."""

    def __init__(self, explicit: Sequence[RateLimitResource] = ()) -> None:
        self._lock = threading.Lock()
        self._explicit: ResourceMap = {}
        for resource in explicit:
            device = EVERY_DEVICE if resource.device is None else resource.device
            counts = self._explicit.setdefault(device, {})
            counts[resource.name] = max(counts.get(resource.name, 0), resource.count)
        self._slots: list[InstanceSlot] = []
        self._available: ResourceMap = {}
        self._allocated: ResourceMap = {}
        self._staged: list[tuple[int, int, InstanceSlot]] = []
        self._order = itertools.count()
        # Released instances about to stage again: their next priority key and until when
        # (monotonic seconds) they hold their turn.
        self._expected: dict[InstanceSlot, tuple[int, float]] = {}

    # ----------------------------------------------------------------- loading

    def register(
        self,
        model: str,
        instance: str,
        device_id: int,
        resources: Iterable[RateLimiterResource],
        priority: int,
    ) -> InstanceSlot:
        """Add an instance; raises InvalidArgumentError (and adds nothing) when the
        resources cannot work out, in Triton's words."""
        needs: ResourceMap = {}
        for resource in resources:
            key = GLOBAL if resource.is_global else device_id
            needs.setdefault(key, {})[resource.name] = resource.count
        slot = InstanceSlot(self, model, instance, max(priority, 1), needs)
        with self._lock:
            slots = [*self._slots, slot]
            self._available = self._limits(slots)  # raises before anything changes
            self._slots = slots
        return slot

    def unregister(self, slots: Iterable[InstanceSlot]) -> None:
        """Remove a model's instances (they no longer execute)."""
        gone = set(slots)
        with self._lock:
            self._slots = [s for s in self._slots if s not in gone]
            self._available = self._limits(self._slots)
            for slot in gone:
                self._expected.pop(slot, None)
            self._staged = [entry for entry in self._staged if entry[2] not in gone]
            heapq.heapify(self._staged)
            self._allocate_staged()

    def _limits(self, slots: Sequence[InstanceSlot]) -> ResourceMap:
        """What each resource has available, given these instances (Triton's
        ComputeResourceLimits, ParseAndValidateExplicitResources, ValidateMaxResources)."""
        most: ResourceMap = {}
        for slot in slots:
            for device, needs in slot.resources.items():
                counts = most.setdefault(device, {})
                for name, count in needs.items():
                    counts[name] = max(counts.get(name, 0), count)
        if self._explicit:
            for device, counts in most.items():
                for name, needed in counts.items():
                    given = self._explicit_count(device, name)
                    if given < needed:
                        raise InvalidArgumentError(
                            f'Resource count for "{name}" is limited to {given} which will '
                            "prevent scheduling of one or more model instances, the minimum "
                            f"required count is {needed}"
                        )
                    counts[name] = given
        for name in most.get(GLOBAL, {}):
            if any(name in counts for device, counts in most.items() if device != GLOBAL):
                raise InvalidArgumentError(
                    f'Resource "{name}" is present as both global and device-specific '
                    "resource in the model configuration."
                )
        return most

    def _explicit_count(self, device: int, name: str) -> int:
        if device == GLOBAL:  # a global resource may be given for any device
            return max((c.get(name, 0) for c in self._explicit.values()), default=0)
        return max(
            self._explicit.get(device, {}).get(name, 0),
            self._explicit.get(EVERY_DEVICE, {}).get(name, 0),
        )

    # --------------------------------------------------------------- executing

    def _stage(self, slot: InstanceSlot) -> None:
        with self._lock:
            self._expected.pop(slot, None)
            heapq.heappush(self._staged, (slot.exec_count * slot.priority, next(self._order), slot))
            self._allocate_staged()

    def _release(self, slot: InstanceSlot, more_work: bool) -> None:
        with self._lock:
            slot.exec_count += 1
            for device, needs in slot.resources.items():
                held = self._allocated[device]
                for name, count in needs.items():
                    held[name] -= count
            if more_work:
                self._expected[slot] = (
                    slot.exec_count * slot.priority,
                    time.monotonic() + EXPECTATION_S,
                )
            self._allocate_staged()

    def _expire_expectations(self) -> None:
        with self._lock:
            now = time.monotonic()
            for slot, (_, until) in list(self._expected.items()):
                if until <= now:
                    del self._expected[slot]
            self._allocate_staged()

    def _allocate_staged(self) -> None:
        """Allocate staged instances in priority order while the first one fits and no
        instance about to stage again would come before it."""
        while self._staged:
            key, _, slot = self._staged[0]
            if self._expected and min(k for k, _ in self._expected.values()) < key:
                return
            if not self._fits(slot):
                return
            heapq.heappop(self._staged)
            for device, needs in slot.resources.items():
                held = self._allocated.setdefault(device, {})
                for name, count in needs.items():
                    held[name] = held.get(name, 0) + count
            slot._allocated.set()

    def _fits(self, slot: InstanceSlot) -> bool:
        for device, needs in slot.resources.items():
            available = self._available.get(device, {})
            held = self._allocated.get(device, {})
            for name, count in needs.items():
                if held.get(name, 0) + count > available.get(name, 0):
                    return False
        return True
