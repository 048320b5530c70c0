"""The response cache store, the rate limiter's bookkeeping and their flags, without a
server."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pytriton_core import types
from pytriton_core.cli import build_parser, options_from_args
from pytriton_core.config.spec import RateLimiterResource
from pytriton_core.errors import InvalidArgumentError
from pytriton_core.inference.request import InferenceRequest, RequestedOutput
from pytriton_core.inference.response_cache import InsertOutcome, ResponseCache, cache_key
from pytriton_core.inference.tensor import Tensor
from pytriton_core.options import RateLimitMode, RateLimitResource
from pytriton_core.scheduling.rate_limiter import RateLimiter

FP32 = types.from_wire_name("FP32")
INT32 = types.from_wire_name("INT32")
BYTES = types.from_wire_name("BYTES")


def request(
    data: np.ndarray, datatype: types.DataType | None = FP32, **kw: object
) -> InferenceRequest:
    assert datatype is not None
    return InferenceRequest("m", inputs={"IN": Tensor("IN", datatype, data)}, **kw)  # type: ignore[arg-type]


def key(r: InferenceRequest, version: int = 1) -> bytes:
    found = cache_key(r, "m", version)
    assert found is not None
    return found


def test_the_key_covers_version_shape_datatype_bytes_and_outputs() -> None:
    zeros = np.zeros(4, np.float32)
    base = key(request(zeros))
    assert key(request(zeros.copy())) == base
    assert key(request(zeros), version=2) != base
    assert key(request(zeros.reshape(2, 2))) != base
    assert key(request(np.zeros(4, np.int32), INT32)) != base
    assert key(request(zeros + 1)) != base
    assert key(request(zeros, requested_outputs={"A": RequestedOutput("A")})) != base
    strings = np.array([b"a", b"bc"], dtype=object)
    assert key(request(strings, BYTES)) != key(request(np.array([b"ab", b"c"], object), BYTES))


def test_least_recently_used_entries_leave_first() -> None:
    assert FP32 is not None
    cache = ResponseCache(700)  # two entries of 303 bytes fit, three do not
    out = [Tensor("OUT", FP32, np.ones(64, np.float32))]  # 256 bytes + its header
    assert cache.insert(b"a", out) is InsertOutcome.STORED
    assert cache.insert(b"b", out) is InsertOutcome.STORED
    assert cache.insert(b"a", out) is InsertOutcome.EXISTS
    assert cache.lookup(b"a") is not None  # a is now the most recent
    assert cache.insert(b"c", out) is InsertOutcome.STORED
    assert cache.lookup(b"b") is None and cache.lookup(b"a") is not None
    assert cache.counters.evictions == 1 and len(cache) == 2
    assert cache.insert(b"huge", [Tensor("OUT", FP32, np.ones(1000, np.float32))]) is (
        InsertOutcome.TOO_LARGE
    )
    entry = cache.lookup(b"c")
    assert entry is not None
    np.testing.assert_array_equal(entry.tensors()[0].data, np.ones(64))
    assert not entry.tensors()[0].data.flags.writeable


def test_stored_outputs_are_copies() -> None:
    assert FP32 is not None
    data = np.ones(4, np.float32)
    cache = ResponseCache(1000)
    cache.insert(b"k", [Tensor("OUT", FP32, data)])
    data[:] = 7
    entry = cache.lookup(b"k")
    assert entry is not None and entry.outputs[0].data.tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize(
    ("name", "settings", "message"),
    [
        ("redis", {"host": "x"}, "unknown cache 'redis'"),
        ("local", {}, "config didn't contain a valid 'size' field"),
        ("local", {"size": "lots"}, "'size' must be a byte count"),
        ("local", {"size": "1", "shards": "2"}, "unknown setting(s) shards"),
    ],
)
def test_cache_settings_are_checked(name: str, settings: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ResponseCache.from_settings(name, settings)


def parse(*flags: str):  # type: ignore[no-untyped-def]
    return options_from_args(build_parser().parse_args(list(flags)))


def test_cache_and_rate_limit_flags() -> None:
    options = parse(
        "--cache-config=local,size=1024",
        "--rate-limit=EXECUTION_COUNT",
        "--rate-limit-resource=R:2",
        "--rate-limit-resource=G:4:1",
    )
    assert options.cache.name == "local" and dict(options.cache.settings) == {"size": "1024"}
    assert options.rate_limiter.mode is RateLimitMode.EXECUTION_COUNT
    assert options.rate_limiter.resources == (
        RateLimitResource("R", 2, None),
        RateLimitResource("G", 4, 1),
    )
    assert parse("--response-cache-byte-size=99").cache.settings["size"] == "99"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--cache-config=size=1",), "No cache specified"),
        (("--cache-config=local,size",), "option format is '<cache name>,<setting>=<value>'"),
        (("--cache-config=local,size=1", "--response-cache-byte-size=1"), "Incompatible flags"),
        (("--rate-limit=sometimes",), "invalid argument for --rate-limit"),
        (("--rate-limit-resource=R",), "--rate-limit-resource option format"),
        (("--rate-limit-resource=R:x",), "--rate-limit-resource option format"),
        (("--rate-limit-resource=R:1:2:3",), "--rate-limit-resource option format"),
    ],
)
def test_bad_flags_are_refused(flags: tuple[str, ...], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        parse(*flags)


def resource(name: str, count: int, is_global: bool = False) -> RateLimiterResource:
    return RateLimiterResource(name, is_global, count)


def test_available_counts_default_to_the_largest_need_per_device() -> None:
    limiter = RateLimiter()
    a = limiter.register("a", "a_0", 0, [resource("R", 2)], 1)
    b = limiter.register("b", "b_0", 0, [resource("R", 1)], 1)
    c = limiter.register("c", "c_0", 1, [resource("R", 1)], 1)  # another device: its own R
    a.acquire()
    c.acquire()  # device 1 is free
    started = threading.Event()

    def run_b() -> None:
        b.acquire()
        started.set()
        b.release(more_work=False)

    thread = threading.Thread(target=run_b)
    thread.start()
    assert not started.wait(0.05)  # R on device 0 is held by a
    a.release(more_work=False)
    assert started.wait(5)
    thread.join()
    c.release(more_work=False)


def test_explicit_counts_and_their_checks() -> None:
    limiter = RateLimiter([RateLimitResource("R", 1, 0), RateLimitResource("G", 3)])
    limiter.register("a", "a_0", 0, [resource("R", 1), resource("G", 3, True)], 1)
    with pytest.raises(InvalidArgumentError, match='Resource count for "R" is limited to 0'):
        limiter.register("b", "b_0", 1, [resource("R", 1)], 1)  # device 1 has no R
    with pytest.raises(InvalidArgumentError, match='Resource count for "X" is limited to 0'):
        limiter.register("b", "b_0", 0, [resource("X", 1)], 1)  # not given at all
    with pytest.raises(InvalidArgumentError, match="both global and device-specific"):
        limiter.register("b", "b_0", 0, [resource("G", 1)], 1)
    limiter.register("b", "b_0", 0, [resource("R", 1)], 1)  # the failures added nothing
