"""The compiled batching data path: gather/scatter against numpy as the oracle, and the pool."""

from __future__ import annotations

import gc
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest

from pytriton_core._native.batching import (
    DEFAULT_MAX_CACHED_BYTES,
    PAGE_SIZE,
    BufferPool,
    PooledBuffer,
    gather_batch,
    scatter_batch,
)
from pytriton_core.types import BYTES, DATATYPES, DataType

TRAILING_SHAPES = [(), (3,), (2, 5), (0,), (4, 0, 2), (1, 1, 3), (7, 1)]
BYTES_SAMPLES = [b"", b"a", b"\x00\xff\x00", "héllo wörld".encode(), "日本語".encode(), b"x" * 300]


def by_name(dt: DataType) -> str:
    return dt.wire_name


def random_array(dt: DataType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if dt.is_bytes:
        out = np.empty(shape, dtype=object)
        flat = out.reshape(-1)
        for i in range(flat.size):
            # fresh objects, so that reference counts are the array's own
            sample = BYTES_SAMPLES[int(rng.integers(len(BYTES_SAMPLES)))]
            flat[i] = sample + bytes(rng.integers(0, 256, int(rng.integers(0, 3)), dtype=np.uint8))
        return out
    dtype = dt.numpy_dtype
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


def assert_same(result: np.ndarray, expected: np.ndarray) -> None:
    assert result.dtype == expected.dtype
    assert result.shape == expected.shape
    if result.dtype == object:
        assert result.tolist() == expected.tolist()
    else:
        assert result.tobytes() == expected.tobytes()  # bit-exact, C order


def random_parts(
    dt: DataType, rng: np.random.Generator, count: int, trailing: tuple[int, ...]
) -> list[np.ndarray]:
    return [random_array(dt, (int(rng.integers(0, 6)), *trailing), rng) for _ in range(count)]


# ----------------------------------------------------------------------------------------
# gather vs np.concatenate


@pytest.mark.parametrize("dt", DATATYPES, ids=by_name)
def test_gather_equals_concatenate(dt: DataType) -> None:
    rng = np.random.default_rng(1)
    pool = BufferPool()
    for count in range(1, 9):
        for trailing in TRAILING_SHAPES:
            parts = random_parts(dt, rng, count, trailing)
            expected = np.concatenate(parts)
            for kwargs in ({}, {"pool": pool}):
                result = gather_batch(parts, **kwargs)
                assert_same(result, expected)
                if count > 1:
                    assert result.flags.c_contiguous and result.flags.writeable
                    assert not any(np.shares_memory(result, part) for part in parts)
            out = np.empty_like(expected)
            assert gather_batch(parts, out=out) is out
            assert_same(out, expected)
    del result
    assert pool.stats()["in_use_bytes"] == 0


def non_contiguous_parts(dt: DataType, rng: np.random.Generator) -> list[np.ndarray]:
    """Parts of shape (n, 3, 4) built every awkward way numpy allows."""
    base = random_array(dt, (12, 8, 9), rng)
    transposed = random_array(dt, (4, 3, 5), rng).transpose(2, 1, 0)
    stepped = base[1::3, ::3, 1::2]
    negative = base[::-2, 7::-3, 7::-2]
    mixed = base[::-1, 2:5, ::2][:, :, :4]
    zero_outer = np.broadcast_to(random_array(dt, (3, 4), rng), (6, 3, 4))
    zero_inner = np.broadcast_to(random_array(dt, (2, 3, 1), rng), (2, 3, 4))
    zero_middle = np.broadcast_to(random_array(dt, (5, 1, 4), rng), (5, 3, 4))
    if dt.is_bytes:
        read_only = random_array(dt, (2, 3, 4), rng)
        read_only.flags.writeable = False
    else:
        source = random_array(dt, (2, 3, 4), rng).tobytes()
        read_only = np.frombuffer(source, dtype=dt.numpy_dtype).reshape(2, 3, 4)
    contiguous = random_array(dt, (3, 3, 4), rng)
    parts = [
        transposed,
        stepped,
        negative,
        mixed,
        zero_outer,
        zero_inner,
        zero_middle,
        read_only,
        contiguous,
    ]
    assert sum(not p.flags.c_contiguous for p in parts) >= 7
    assert any(s < 0 for s in negative.strides) and 0 in zero_outer.strides
    assert not read_only.flags.writeable
    return parts


@pytest.mark.parametrize("dt", DATATYPES, ids=by_name)
def test_gather_non_contiguous_parts(dt: DataType) -> None:
    rng = np.random.default_rng(2)
    pool = BufferPool()
    parts = non_contiguous_parts(dt, rng)
    expected = np.concatenate(parts)
    assert_same(gather_batch(parts), expected)
    assert_same(gather_batch(parts, pool=pool), expected)
    for i in range(len(parts)):  # each awkward part alone behind a contiguous one
        pair = [parts[-1], parts[i]]
        assert_same(gather_batch(pair), np.concatenate(pair))


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.float64, np.dtype("V3")])
def test_gather_large_strided_parts_without_gil(dtype: np.dtype) -> None:
    # past the size where the copy drops the GIL, itemsizes with and without a fast path
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, (300, 1000 * np.dtype(dtype).itemsize), dtype=np.uint8)
    base = raw.view(dtype)  # (300, 1000)
    parts = [base.T[::2, :150], base.T[::-3, ::2], np.ascontiguousarray(base.T[:5, 1::2])]
    expected = np.concatenate(parts)
    assert expected.nbytes > 1 << 16
    assert_same(gather_batch(parts, pool=BufferPool()), expected)


@pytest.mark.parametrize("dt", DATATYPES, ids=by_name)
def test_batch_of_one_is_the_part_itself(dt: DataType) -> None:
    rng = np.random.default_rng(4)
    pool = BufferPool()
    for part in (random_array(dt, (3, 2), rng), random_array(dt, (4, 6), rng)[::2, ::-3]):
        assert gather_batch([part]) is part
        assert gather_batch((part,), pool=pool) is part
    assert pool.stats()["allocations"] == 0


# ----------------------------------------------------------------------------------------
# scatter


@pytest.mark.parametrize("dt", DATATYPES, ids=by_name)
def test_scatter_views_share_memory_and_round_trip(dt: DataType) -> None:
    rng = np.random.default_rng(5)
    pool = BufferPool()
    for count in range(1, 9):
        for trailing in ((), (3,), (2, 2)):
            parts = random_parts(dt, rng, count, trailing)
            batched = gather_batch(parts, pool=pool if count > 1 else None)
            views = scatter_batch(batched, [len(p) for p in parts])
            assert len(views) == count
            for view, part in zip(views, parts, strict=True):
                assert_same(view, part)
                if view.size:
                    assert np.shares_memory(view, batched)
            assert_same(gather_batch(views), batched)


def test_scatter_of_strided_and_read_only_arrays() -> None:
    batched = np.arange(60, dtype=np.int32).reshape(6, 10)[::-1, ::3]
    views = scatter_batch(batched, [1, 0, 3, 2])
    assert [v.shape for v in views] == [(1, 4), (0, 4), (3, 4), (2, 4)]
    assert_same(views[2], batched[1:4])
    assert_same(views[3], batched[4:6])
    read_only = np.frombuffer(bytes(48), dtype=np.float32).reshape(4, 3)
    assert all(not v.flags.writeable for v in scatter_batch(read_only, [2, 2]))
    writable = np.zeros((4, 3), dtype=np.float32)
    scatter_batch(writable, [1, 3])[1][0, 0] = 5.0
    assert writable[1, 0] == 5.0


def test_scatter_accepts_numpy_integers_and_empty_batches() -> None:
    batched = np.arange(6)
    assert [v.tolist() for v in scatter_batch(batched, np.array([2, 4]))] == [[0, 1], [2, 3, 4, 5]]
    assert scatter_batch(np.empty((0, 3)), []) == []


@pytest.mark.parametrize(
    ("sizes", "message"),
    [([2, 2], "add up to 4"), ([3, 3], "add up to 6"), ([6, -1], ">= 0"), ([], "add up to 0")],
)
def test_scatter_rejects_sizes_that_do_not_add_up(sizes: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        scatter_batch(np.zeros((5, 2)), sizes)


def test_scatter_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="0-d"):
        scatter_batch(np.zeros(()), [1])
    with pytest.raises(TypeError):
        scatter_batch([1, 2, 3], [3])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        scatter_batch(np.zeros(3), [1.5, 1.5])


# ----------------------------------------------------------------------------------------
# refused batches


def test_gather_refuses_mismatched_parts() -> None:
    f32 = np.zeros((2, 3), np.float32)
    cases: list[tuple[list[np.ndarray], str]] = [
        ([f32, np.zeros((2, 3), np.float64)], "part 1 has dtype float64, but part 0 has float32"),
        ([f32, np.zeros((2, 3), np.dtype(">f4"))], "dtype"),
        ([f32, np.zeros((2, 3), np.float16)], "dtype"),
        ([f32, np.zeros((2, 4), np.float32)], r"part 1 has shape \(2, 4\), but part 0 has"),
        ([f32, f32, np.zeros((2, 3, 1), np.float32)], "part 2 has shape"),
        ([f32, np.zeros(6, np.float32)], "part 1 has shape"),
        ([np.zeros((2, 2), object), np.zeros((2, 3), object)], "part 1 has shape"),
        ([np.zeros((2, 2), object), np.zeros((2, 2), np.float32)], "dtype"),
        ([np.zeros((), np.float32), np.zeros((), np.float32)], "0-d"),
        ([], "at least one part"),
    ]
    for parts, message in cases:
        with pytest.raises(ValueError, match=message):
            gather_batch(parts)


def test_gather_refuses_bad_arguments() -> None:
    f32 = np.ones((2, 3), np.float32)
    with pytest.raises(TypeError, match="part 1 must be a numpy array"):
        gather_batch([f32, [[1.0, 2.0, 3.0]]])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="not both"):
        gather_batch([f32, f32], out=np.empty((4, 3), np.float32), pool=BufferPool())
    with pytest.raises(TypeError, match="holds references"):
        structured = np.zeros(2, dtype=[("a", object), ("b", np.int32)])
        gather_batch([structured, structured])
    bad_outs = [
        np.empty((5, 3), np.float32),
        np.empty((4, 3), np.float64),
        np.empty((3, 4), np.float32).T,
        np.empty(12, np.float32),
        np.frombuffer(bytes(48), np.float32).reshape(4, 3),
    ]
    for out in bad_outs:
        with pytest.raises(ValueError, match="writable C-contiguous"):
            gather_batch([f32, f32], out=out)
    storage = np.zeros((6, 3), np.float32)
    with pytest.raises(ValueError, match="overlaps the memory of part 1"):
        gather_batch([f32, storage[4:]], out=storage[2:])
    gather_batch([f32, storage[4:]], out=storage[:4])  # disjoint: fine


# ----------------------------------------------------------------------------------------
# BYTES references


def test_bytes_reference_counts() -> None:
    rng = np.random.default_rng(6)
    parts = [random_array(BYTES, (n, 2), rng) for n in (3, 0, 2, 4)]
    parts.append(random_array(BYTES, (4, 4), rng)[::-1, ::2])
    elements = [e for p in parts for e in p.reshape(-1).tolist()]
    # an element may be one object in several places (b"" is a singleton)
    unique = {id(e): e for e in elements}
    occurrences = Counter(id(e) for e in elements)

    def counts() -> dict[int, int]:
        return {key: sys.getrefcount(obj) for key, obj in unique.items()}

    before = counts()
    plus_one_each = {key: n + occurrences[key] for key, n in before.items()}

    result = gather_batch(parts)
    assert counts() == plus_one_each
    assert all(a is b for a, b in zip(result.reshape(-1).tolist(), elements, strict=True))
    del result
    assert counts() == before

    # into an out array: what it held loses its reference, what it gets gains one
    sentinels = [object() for _ in range(len(elements))]
    out = np.empty((len(elements) // 2, 2), dtype=object)
    out.reshape(-1)[:] = sentinels
    sentinel_before = [sys.getrefcount(s) for s in sentinels]
    assert gather_batch(parts, out=out) is out
    assert [sys.getrefcount(s) for s in sentinels] == [b - 1 for b in sentinel_before]
    assert counts() == plus_one_each
    gather_batch(parts, out=out)  # the same elements again: no net change
    assert counts() == plus_one_each
    del out
    assert counts() == before


def test_bytes_are_never_pooled() -> None:
    pool = BufferPool()
    parts = [np.array([b"a", "ü".encode()], dtype=object), np.array([b""], dtype=object)]
    result = gather_batch(parts, pool=pool)
    assert result.tolist() == [b"a", "ü".encode(), b""]
    assert pool.stats()["allocations"] == 0


# ----------------------------------------------------------------------------------------
# the pool


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc (Linux)")
def test_steady_batches_allocate_nothing() -> None:
    pool = BufferPool()
    rng = np.random.default_rng(7)
    inputs = [
        [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(8)],
        [rng.standard_normal((1, 4096)).astype(np.float32) for _ in range(8)],
    ]
    expected = [np.concatenate(parts) for parts in inputs]

    def cycle() -> None:
        for parts in inputs:
            batched = gather_batch(parts, pool=pool)
            views = scatter_batch(batched, [1] * 8)
            del batched, views

    for _ in range(10):
        cycle()
    gc.collect()
    warm = pool.stats()
    rss = rss_bytes()
    for _ in range(10_000):
        cycle()
    gc.collect()
    after = pool.stats()
    assert after["allocations"] == warm["allocations"] == 2  # one buffer per batch shape
    assert after["reuses"] - warm["reuses"] == 20_000
    assert after["in_use_bytes"] == 0
    assert rss_bytes() - rss < 5 << 20
    for parts, oracle in zip(inputs, expected, strict=True):
        assert_same(gather_batch(parts, pool=pool), oracle)


@pytest.mark.parametrize("nbytes", [0, 1, 100, 4095, 4096, 4097, 65_536, 1_000_000, 3 << 20])
def test_pool_buffers_are_page_aligned_size_classes(nbytes: int) -> None:
    pool = BufferPool()
    buf = pool.acquire(nbytes)
    assert buf.address % PAGE_SIZE == 0
    assert buf.nbytes == nbytes == len(memoryview(buf))
    assert buf.capacity >= max(nbytes, 4096)
    assert buf.capacity & (buf.capacity - 1) == 0
    assert buf.capacity < 2 * max(nbytes, 4096)
    array = np.frombuffer(buf, np.uint8, nbytes)
    array[:] = 7  # writable
    assert bytes(memoryview(buf)[:3]) == b"\x07\x07\x07"[: min(3, nbytes)]
    for count in (2, 5, 33):
        parts = [np.ones((n, 3, 5), np.float64) for n in range(1, count + 1)]
        assert gather_batch(parts, pool=pool).ctypes.data % PAGE_SIZE == 0


def test_released_buffers_are_reused() -> None:
    pool = BufferPool()
    first = pool.acquire(5000)
    address = first.address
    first.release()
    again = pool.acquire(8000)  # same 8 KiB class
    assert again.address == address
    assert pool.stats()["allocations"] == 1 and pool.stats()["reuses"] == 1


def test_release_happens_exactly_once() -> None:
    pool = BufferPool()
    buf = pool.acquire(100)
    assert pool.stats()["in_use_bytes"] == 4096
    buf.release()
    buf.release()  # no-op
    assert buf.released and buf.address == 0
    state = pool.stats()
    assert state["in_use_bytes"] == 0 and state["cached_bytes"] == 4096
    with pytest.raises(BufferError, match="released"):
        memoryview(buf)
    del buf
    gc.collect()
    assert pool.stats() == state  # deallocation gave nothing back a second time

    a, b = pool.acquire(10), pool.acquire(10)
    assert a.address != b.address  # one cached copy only: no double hand-out
    assert pool.stats()["allocations"] == 2


def test_numpy_array_keeps_its_buffer() -> None:
    pool = BufferPool()
    buf = pool.acquire(4 * 24)
    array = np.frombuffer(buf, np.float32, 24).reshape(2, 3, 4)
    view = array[1, ::2]
    with pytest.raises(BufferError, match="1 array"):
        buf.release()
    del buf, array
    gc.collect()
    assert pool.stats()["in_use_bytes"] == 4096
    view[:] = 3.0  # still valid memory
    assert float(view.sum()) == 24.0
    del view
    gc.collect()
    assert pool.stats()["in_use_bytes"] == 0
    assert pool.stats()["cached_bytes"] == 4096


def test_gathered_array_and_its_views_keep_the_buffer() -> None:
    pool = BufferPool()
    parts = [np.full((2, 1000), i, np.float32) for i in range(3)]
    batched = gather_batch(parts, pool=pool)
    in_use = pool.stats()["in_use_bytes"]
    assert in_use == 32768
    views = scatter_batch(batched, [2, 2, 2])
    buffer = batched.base
    assert isinstance(buffer, PooledBuffer)
    with pytest.raises(BufferError, match="backs an array from gather_batch"):
        buffer.release()
    del batched, buffer
    gc.collect()
    assert pool.stats()["in_use_bytes"] == in_use
    assert [float(v.mean()) for v in views] == [0.0, 1.0, 2.0]
    del views
    gc.collect()
    assert pool.stats()["in_use_bytes"] == 0


def test_max_cached_bytes_frees_the_excess() -> None:
    pool = BufferPool(max_cached_bytes=8192)
    held = [pool.acquire(4096) for _ in range(3)]
    big = pool.acquire(1 << 20)
    del held, big
    state = pool.stats()
    assert state["cached_bytes"] == 8192
    assert state["frees"] == 2
    assert state["in_use_bytes"] == 0
    assert pool.trim() == 8192
    assert pool.stats()["cached_bytes"] == 0
    assert pool.stats()["frees"] == 4


def test_pool_stats_and_arguments() -> None:
    pool = BufferPool()
    assert pool.stats() == {
        "allocations": 0,
        "reuses": 0,
        "frees": 0,
        "cached_bytes": 0,
        "in_use_bytes": 0,
        "max_cached_bytes": DEFAULT_MAX_CACHED_BYTES,
        "memory_kind": "pageable",
    }
    assert DEFAULT_MAX_CACHED_BYTES == 256 << 20
    with pytest.raises(ValueError):
        BufferPool(max_cached_bytes=-1)
    with pytest.raises(ValueError):
        pool.acquire(-1)
    with pytest.raises(MemoryError):
        pool.acquire(1 << 60)
    with pytest.raises(TypeError):
        PooledBuffer()


def test_buffer_outlives_its_pool_object() -> None:
    buf = BufferPool().acquire(64)
    gc.collect()
    np.frombuffer(buf, np.uint8)[:] = 1
    assert bytes(buf)[:2] == b"\x01\x01"
    del buf  # returns into the pool the buffer kept alive; no crash


def test_concurrent_gathers_share_one_pool() -> None:
    pool = BufferPool()
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            rng = np.random.default_rng(seed)
            for i in range(150):
                cols = 16_384 if i % 2 else 16  # with and without the GIL released
                parts = [
                    rng.standard_normal((int(rng.integers(1, 4)), cols)).astype(np.float32)
                    for _ in range(int(rng.integers(2, 9)))
                ]
                parts[0] = parts[0][::-1]
                batched = gather_batch(parts, pool=pool)
                assert batched.tobytes() == np.concatenate(parts).tobytes()
                for view, part in zip(
                    scatter_batch(batched, [len(p) for p in parts]), parts, strict=True
                ):
                    assert np.array_equal(view, part)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    gc.collect()
    state = pool.stats()
    assert state["in_use_bytes"] == 0
    assert state["reuses"] + state["allocations"] == 4 * 150


def test_copy_runs_without_the_gil() -> None:
    """A large gather in one thread lets another thread run Python meanwhile."""
    parts = [np.ones((1, 8 << 20), np.uint8)[:, ::-1] for _ in range(4)]
    progress: list[int] = []
    done = threading.Event()

    def spin(step: Callable[[], None]) -> None:
        while not done.is_set():
            step()

    thread = threading.Thread(target=spin, args=(lambda: progress.append(1),))
    old = sys.getswitchinterval()
    thread.start()
    try:
        while not progress:
            pass
        # From here on the spinner gets the GIL only when this thread releases it (the
        # three gathers take well under a second).
        sys.setswitchinterval(1.0)
        for _ in range(3):
            before = len(progress)
            gather_batch(parts)
            if len(progress) > before:
                break
        else:
            pytest.fail("no Python ran in another thread during three 32 MiB gathers")
    finally:
        done.set()
        sys.setswitchinterval(old)
        thread.join()
