"""The compiled shared-memory extension: range checks, mapping, views, copies, lifetime.

The oracle is plain arithmetic on Python ints (which cannot overflow) and the bytes a
``multiprocessing.shared_memory`` object (the client side) holds.
"""

from __future__ import annotations

import gc
import itertools
import os
import signal
import subprocess
import sys
import textwrap
import uuid
import weakref
from collections.abc import Iterator
from multiprocessing import shared_memory

import numpy as np
import pytest

from pytriton_core._native import shm

U64 = 2**64 - 1
OBJECT_SIZE = 3 * 4096 + 100


@pytest.fixture
def client_object() -> Iterator[shared_memory.SharedMemory]:
    """A client's POSIX shared-memory object, removed afterwards."""
    obj = shared_memory.SharedMemory(
        f"/pt_unit_{uuid.uuid4().hex[:12]}", create=True, size=OBJECT_SIZE
    )
    try:
        yield obj
    finally:
        obj.close()
        obj.unlink()


def key_of(obj: shared_memory.SharedMemory) -> str:
    return "/" + obj.name.lstrip("/")


def expected_part(extent: int, offset: int, size: int) -> str | None:
    """What check_range must say, by unbounded integer arithmetic."""
    if offset < 0 or offset > U64 or offset > extent:
        return "offset"
    if size < 0 or size > U64 or offset + size > extent:
        return "offset + byte size"
    return None


EDGES = [0, 1, 7, 8, 9, 2**32, 2**63 - 1, 2**63, U64 - 1, U64, U64 + 1, 2**65, -1, -(2**63)]


@pytest.mark.parametrize("extent", [0, 8, 2**32, U64])
def test_check_range_matches_unbounded_arithmetic(extent: int) -> None:
    for offset, size in itertools.product(EDGES, EDGES):
        part = expected_part(extent, offset, size)
        if part is None:
            shm.check_range(extent, offset, size)
            continue
        with pytest.raises(shm.RegionRangeError) as info:
            shm.check_range(extent, offset, size)
        assert info.value.part == part, (extent, offset, size)


def test_check_range_never_wraps_around() -> None:
    # offset + size wraps to 7 in uint64: a naive "offset + size <= extent" would pass it.
    with pytest.raises(shm.RegionRangeError):
        shm.check_range(16, 8, U64)
    with pytest.raises(shm.RegionRangeError):
        shm.check_range(U64, U64, 1)
    shm.check_range(U64, U64, 0)


def test_check_range_refuses_non_integers_and_bad_extents() -> None:
    with pytest.raises(TypeError):
        shm.check_range(8, 1.5, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        shm.check_range(8, 0, "4")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        shm.check_range(-1, 0, 0)
    with pytest.raises(ValueError):
        shm.check_range(U64 + 1, 0, 0)


def test_open_maps_the_range_at_any_offset(client_object: shared_memory.SharedMemory) -> None:
    client_object.buf[:] = bytes(i % 251 for i in range(OBJECT_SIZE))
    for offset in (0, 1, 4095, 4096, 4097, OBJECT_SIZE - 1):
        size = OBJECT_SIZE - offset
        region = shm.SystemRegion.open(key_of(client_object), offset, size)
        assert (region.key, region.offset, region.byte_size) == (
            key_of(client_object),
            offset,
            size,
        )
        assert bytes(region.view(0, size)) == bytes(client_object.buf[offset:])
        assert region.backed()


@pytest.mark.parametrize(
    ("offset", "size", "part"),
    [
        (0, OBJECT_SIZE + 1, "offset + byte size"),
        (OBJECT_SIZE, 1, "offset + byte size"),
        (OBJECT_SIZE + 1, 1, "offset"),
        (8, U64, "offset + byte size"),  # offset + size wraps around
        (U64, 2, "offset"),
        (-1, 4, "offset"),
        (0, -4, "offset + byte size"),
        (2**64, 1, "offset"),
        (0, 0, "byte size"),
    ],
)
def test_open_refuses_ranges_outside_the_object(
    client_object: shared_memory.SharedMemory, offset: int, size: int, part: str
) -> None:
    with pytest.raises(shm.RegionRangeError) as info:
        shm.SystemRegion.open(key_of(client_object), offset, size)
    assert info.value.part == part


@pytest.mark.parametrize("key", ["/pt_unit_no_such_object", "bad/key/with/slashes"])
def test_open_refuses_keys_that_cannot_be_opened(key: str) -> None:
    with pytest.raises(shm.RegionOpenError) as info:
        shm.SystemRegion.open(key, 0, 8)
    assert info.value.errno != 0


@pytest.mark.parametrize("key", ["", "/with\0nul"])
def test_open_refuses_malformed_keys(key: str) -> None:
    with pytest.raises(ValueError):
        shm.SystemRegion.open(key, 0, 8)


def test_regions_are_not_constructible() -> None:
    with pytest.raises(TypeError):
        shm.SystemRegion()
    with pytest.raises(TypeError):
        shm.RegionView()


def test_views_are_zero_copy_and_read_only(client_object: shared_memory.SharedMemory) -> None:
    region = shm.SystemRegion.open(key_of(client_object), 4096, 64)
    array = np.frombuffer(region.view(8, 16), np.float32)
    assert not array.flags.writeable
    client_object.buf[4096 + 8 : 4096 + 24] = np.arange(4, dtype=np.float32).tobytes()
    assert array.tolist() == [0.0, 1.0, 2.0, 3.0]  # sees the client's later writes
    assert array.ctypes.data == region.address + 8
    with pytest.raises(TypeError):
        memoryview(region.view(0, 4))[0] = 1
    with pytest.raises(ValueError, match="read-only"):
        np.frombuffer(region.view(0, 4), np.uint8)[0] = 1


@pytest.mark.parametrize(
    ("offset", "size"), [(0, 65), (64, 1), (65, 0), (-1, 1), (1, -1), (8, U64)]
)
def test_views_and_writes_check_their_range(
    client_object: shared_memory.SharedMemory, offset: int, size: int
) -> None:
    region = shm.SystemRegion.open(key_of(client_object), 100, 64)
    for use in (region.check, region.view, lambda o, s: region.write(o, s, b"")):
        with pytest.raises(shm.RegionRangeError):
            use(offset, size)


def test_write_copies_into_the_client_region(client_object: shared_memory.SharedMemory) -> None:
    region = shm.SystemRegion.open(key_of(client_object), 4000, 8192 + 16)
    data = np.arange(2048, dtype=np.float32)  # crosses page boundaries of the object
    assert region.write(16, data.nbytes, data) == data.nbytes
    assert np.array_equal(np.frombuffer(client_object.buf[4016 : 4016 + 8192], np.float32), data)
    assert region.write(0, 100, b"abc") == 3  # smaller than reserved: fine
    assert bytes(client_object.buf[4000:4003]) == b"abc"


def test_large_writes_release_the_gil_and_still_copy(
    client_object: shared_memory.SharedMemory,
) -> None:
    big = shared_memory.SharedMemory(
        f"/pt_unit_big_{uuid.uuid4().hex[:8]}", create=True, size=4 << 20
    )
    try:
        region = shm.SystemRegion.open(key_of(big), 0, 4 << 20)
        data = np.random.default_rng(0).integers(0, 255, 4 << 20, dtype=np.uint8)
        region.write(0, 4 << 20, data)
        assert bytes(big.buf) == data.tobytes()
        del region
    finally:
        big.close()
        big.unlink()


def test_write_refuses_data_larger_than_reserved(client_object: shared_memory.SharedMemory) -> None:
    region = shm.SystemRegion.open(key_of(client_object), 0, 64)
    before = bytes(client_object.buf[:64])
    with pytest.raises(shm.OutputTooLargeError) as info:
        region.write(0, 8, b"x" * 9)
    assert (info.value.needed, info.value.byte_size) == (9, 8)
    assert bytes(client_object.buf[:64]) == before


def test_write_handles_a_source_overlapping_the_destination(
    client_object: shared_memory.SharedMemory,
) -> None:
    region = shm.SystemRegion.open(key_of(client_object), 0, 64)
    client_object.buf[:16] = bytes(range(16))
    source = np.frombuffer(region.view(0, 16), np.uint8)
    region.write(4, 16, source)  # memmove semantics
    assert bytes(client_object.buf[4:20]) == bytes(range(16))


def test_write_refuses_non_contiguous_data(client_object: shared_memory.SharedMemory) -> None:
    region = shm.SystemRegion.open(key_of(client_object), 0, 64)
    with pytest.raises(BufferError):
        region.write(0, 64, memoryview(np.arange(8, dtype=np.uint8)[::2]))


def run_isolated(source: str) -> subprocess.CompletedProcess[str]:
    """Run ``source`` in a fresh interpreter: a SIGBUS that is not repaired ends that one,
    not the test session."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


SHRINK_PRELUDE = """
    import os, sys, uuid
    from multiprocessing import shared_memory
    import numpy as np
    from pytriton_core._native import shm

    obj = shared_memory.SharedMemory(f"/pt_unit_{uuid.uuid4().hex[:12]}", create=True,
                                     size=4 * 4096)
    key = "/" + obj.name.lstrip("/")
    obj.buf[:] = b"\\x07" * (4 * 4096)
    region = shm.SystemRegion.open(key, 4096, 2 * 4096)

    def shrink(size):
        fd = os.open("/dev/shm/" + key.lstrip("/"), os.O_RDWR)
        os.ftruncate(fd, size)  # the client shrinks it under the mapping
        os.close(fd)
"""


def test_a_shrunk_object_read_through_a_view_does_not_kill_the_process() -> None:
    result = run_isolated(
        SHRINK_PRELUDE
        + """
    array = np.frombuffer(region.view(0, 2 * 4096), np.uint8)
    assert region.backed() and int(array[:8].sum()) == 56
    shrink(4096 + 100)  # the region's first page keeps its end; its second page goes
    total = int(array.astype(np.int64).sum())  # touches the page past the end: SIGBUS
    assert not region.backed()
    try:
        region.view(0, 8)
    except shm.RegionTruncatedError as exc:
        print("refused:", exc)
    try:
        region.write(0, 8, b"x" * 8)
    except shm.RegionTruncatedError:
        print("write refused")
    print("alive", total)
    obj.close(); obj.unlink()
    """
    )
    assert result.returncode == 0, result.stderr
    assert "refused: shared memory object" in result.stdout
    assert "write refused" in result.stdout
    # The 100 bytes the object keeps read 7 (ftruncate zeroes the rest of their page); the
    # page past the new end reads zeros.
    assert "alive 700" in result.stdout


def test_a_write_that_meets_a_shrunk_object_raises() -> None:
    result = run_isolated(
        SHRINK_PRELUDE
        + """
    shrink(0)
    try:
        region.write(4096, 4096, b"x" * 4096)
    except shm.RegionTruncatedError:
        print("write failed, process alive", region.backed())
    obj.close(); obj.unlink()
    """
    )
    assert result.returncode == 0, result.stderr
    assert "write failed, process alive False" in result.stdout


def test_faults_outside_every_region_go_to_the_previous_handler() -> None:
    # faulthandler's SIGBUS handler is there first; a fault on another mapping reaches it.
    result = run_isolated(
        SHRINK_PRELUDE
        + """
    import faulthandler, mmap, tempfile
    faulthandler.enable()
    region2 = shm.SystemRegion.open(key, 0, 4096)  # the guard is installed after faulthandler
    with tempfile.TemporaryFile() as f:
        f.truncate(8192)
        mapped = mmap.mmap(f.fileno(), 8192)
        f.truncate(0)
        obj.close(); obj.unlink()
        print("touching", flush=True)
        mapped[4096]  # no region of ours: the process dies as it would have
    print("not reached")
    """
    )
    assert "touching" in result.stdout and "not reached" not in result.stdout
    assert result.returncode == -signal.SIGBUS
    assert "Bus error" in result.stderr  # faulthandler's report


def test_regions_hold_no_file_descriptor(client_object: shared_memory.SharedMemory) -> None:
    before = len(os.listdir("/proc/self/fd"))
    regions = [shm.SystemRegion.open(key_of(client_object), 0, 64) for _ in range(300)]
    assert len(os.listdir("/proc/self/fd")) == before
    assert all(region.backed() for region in regions)
    del regions
    gc.collect()


@pytest.mark.parametrize("exporter", ["view", "private_copy"])
def test_the_mapping_lives_as_long_as_any_view(
    client_object: shared_memory.SharedMemory, exporter: str
) -> None:
    # A read-only view or a private copy of the range: either keeps its region mapped.
    region = shm.SystemRegion.open(key_of(client_object), 0, 64)
    alive = weakref.ref(region)
    client_object.buf[:4] = b"\x01\x02\x03\x04"
    array = np.frombuffer(getattr(region, exporter)(0, 4), np.uint8)
    del region
    gc.collect()
    assert alive() is not None  # the array keeps its exporter, which keeps the region
    assert array.tolist() == [1, 2, 3, 4]
    del array
    gc.collect()
    assert alive() is None  # unmapped with the last reference


# ------------------------------------------------------------ private (copy-on-write) copies


def test_a_private_copy_reads_the_client_bytes_and_keeps_its_writes(
    client_object: shared_memory.SharedMemory,
) -> None:
    client_object.buf[:] = bytes(i % 251 for i in range(OBJECT_SIZE))
    region = shm.SystemRegion.open(key_of(client_object), 100, OBJECT_SIZE - 100)
    copy = region.private_copy(4000, 5000)  # across pages, not aligned
    assert copy is not None and copy.nbytes == 5000 and copy.region is region
    array = np.frombuffer(copy, np.uint8)
    assert array.flags.writeable
    assert array.tobytes() == bytes(client_object.buf[4100:9100])
    array[:] = 0
    assert bytes(client_object.buf[4100:9100]) == bytes(i % 251 for i in range(4100, 9100))
    before = len(os.listdir("/proc/self/fd"))
    copies = [region.private_copy(0, 64) for _ in range(50)]
    assert len(os.listdir("/proc/self/fd")) == before  # no descriptor kept
    del copies
    with pytest.raises(shm.RegionRangeError):
        region.private_copy(OBJECT_SIZE - 150, 100)


def test_no_private_copy_of_an_object_replaced_under_its_name() -> None:
    name = f"pt_unit_{uuid.uuid4().hex[:12]}"
    registered = shared_memory.SharedMemory(name, create=True, size=OBJECT_SIZE)
    region = shm.SystemRegion.open("/" + name, 0, 4096)
    registered.unlink()  # the client removes the name and makes another object with it
    registered.close()
    replacement = shared_memory.SharedMemory(name, create=True, size=OBJECT_SIZE)
    try:
        assert region.private_copy(0, 4096) is None  # not the object registered
        replacement.unlink()
        assert region.private_copy(0, 4096) is None  # no object under the name at all
    finally:
        replacement.close()


@pytest.mark.parametrize("shift", [-4100, -8, -4, 4, 8, 4100])
def test_a_write_from_a_private_copy_of_overlapping_bytes_is_exact(
    client_object: shared_memory.SharedMemory, shift: int
) -> None:
    # The copy aliases the object's pages through other addresses: the write must copy the
    # bytes as they were, not what it has already written (memmove cannot see the overlap).
    start, size = 4200, 4000
    original = np.random.default_rng(shift & 0xFF).integers(0, 255, OBJECT_SIZE, np.uint8)
    client_object.buf[:] = original.tobytes()
    region = shm.SystemRegion.open(key_of(client_object), 0, OBJECT_SIZE)
    source = np.frombuffer(region.private_copy(start, size), np.uint8)
    region.write(start + shift, size, source)
    assert (
        bytes(client_object.buf[start + shift : start + shift + size])
        == original[start : start + size].tobytes()
    )


def test_a_shrunk_object_read_through_a_private_copy_marks_the_region() -> None:
    result = run_isolated(
        SHRINK_PRELUDE
        + """
    copy = region.private_copy(0, 2 * 4096)
    array = np.frombuffer(copy, np.uint8)
    shrink(4096 + 100)  # the region's second page goes before the copy has read it
    total = int(array.astype(np.int64).sum())  # touches the page past the end: SIGBUS
    print("alive", total, "backed", region.backed())
    del array, copy
    obj.close(); obj.unlink()
    """
    )
    assert result.returncode == 0, result.stderr
    assert "alive 700 backed False" in result.stdout


def test_writable_copy_maps_large_region_inputs_and_copies_the_rest(
    client_object: shared_memory.SharedMemory,
) -> None:
    from pytriton_core.memory.system_shm import PRIVATE_COPY_MIN_BYTES, writable_copy

    size = PRIVATE_COPY_MIN_BYTES + 4096
    obj = shared_memory.SharedMemory(f"/pt_unit_{uuid.uuid4().hex[:12]}", create=True, size=size)
    try:
        np.frombuffer(obj.buf, np.uint8)[:] = 3
        region = shm.SystemRegion.open("/" + obj.name.lstrip("/"), 0, size)
        large = np.ndarray(
            (PRIVATE_COPY_MIN_BYTES // 4,), np.float32, region.view(8, PRIVATE_COPY_MIN_BYTES)
        )
        small = np.ndarray((16,), np.float32, region.view(8, 64))
        mapped, copied = writable_copy(large), writable_copy(small)
        assert isinstance(mapped.base, shm.PrivateCopy) and copied.base is None
        reshaped = writable_copy(large.reshape(4, -1))  # a view of the view: mapped too
        assert isinstance(reshaped.base, shm.PrivateCopy) and np.array_equal(
            reshaped, large.reshape(4, -1)
        )
        assert mapped.flags.writeable and copied.flags.writeable
        assert np.array_equal(mapped, large) and np.array_equal(copied, small)
        plain = np.zeros(PRIVATE_COPY_MIN_BYTES // 4, np.float32)
        plain.flags.writeable = False
        assert writable_copy(plain).base is None  # not a region's: copied
        del large, small, mapped, copied, reshaped, region
        gc.collect()
    finally:
        obj.close()
        obj.unlink()
