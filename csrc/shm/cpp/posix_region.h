// Client regions of POSIX shared memory: map, check ranges, copy. Pure data movement, no
// Python.h; every call may run without the GIL.
//
// A region is [offset, offset + size) of the shared-memory object a client created
// (shm_open name = its key). map_region() maps exactly that range read/write (from the page
// that holds its first byte) and closes the object's descriptor at once: a region holds no
// descriptor. A client that shrinks the object under the mapping makes a touch of the pages
// past its end raise SIGBUS; the guard (fault_guard.h) turns that into a mark that
// region_backed() reads, and the touch completes on anonymous memory. unmap_region() undoes
// the mapping; the owner calls it once, when nothing reads the region.
//
// Range arithmetic never forms offset + size, which wraps around 2^64: check_range() is the
// one place that decides whether a range lies inside an extent.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fault_guard.h"

namespace pytriton {
namespace shm {

enum RangeStatus : int {
    kInRange = 0,
    kBadOffset = 1,  // the offset itself lies beyond the extent
    kBadEnd = 2,     // the offset is inside, but offset + size is not
};

// Whether [offset, offset + size) lies within [0, extent). An empty range at the very end
// (offset == extent, size == 0) is inside.
inline RangeStatus check_range(std::uint64_t extent, std::uint64_t offset,
                               std::uint64_t size) noexcept {
    if (offset > extent) return kBadOffset;
    if (size > extent - offset) return kBadEnd;
    return kInRange;
}

enum MapStatus : int {
    kMapped = 0,
    kOpenFailed = 1,   // shm_open: no such object, no permission, bad name (errno set)
    kStatFailed = 2,   // fstat (errno set)
    kOutOfObject = 3,  // the range is empty or not inside the object
    kMapFailed = 4,    // mmap (errno set)
    kGuardFailed = 5,  // the SIGBUS guard could not take the mapping (no handler, full)
};

struct Mapping {
    long guard = -1;           // the mapping's slot in the SIGBUS guard
    void* base = nullptr;      // what mmap returned: page aligned
    std::size_t length = 0;    // the bytes mapped from base
    char* data = nullptr;      // the region's first byte
    std::uint64_t offset = 0;  // the region's offset in the object
    std::uint64_t size = 0;    // the region's byte size
    std::uint64_t device = 0;  // the object's identity (fstat), to know it again by name
    std::uint64_t inode = 0;
};

// Map [offset, offset + size) of the open object `fd` (whose fstat is `st`) into *out with
// `flags` (MAP_SHARED or MAP_PRIVATE), from the page that holds the first byte, guarded
// (its faults also marking slot `also_mark`); closes `fd` whatever happens. The range must
// lie inside the object and not be empty.
inline MapStatus map_open_object(int fd, const struct stat& st, std::uint64_t offset,
                                 std::uint64_t size, int flags, long also_mark, Mapping* out,
                                 int* err) noexcept {
    const long page = sysconf(_SC_PAGESIZE);
    const std::uint64_t lead = offset % static_cast<std::uint64_t>(page > 0 ? page : 4096);
    // Both fit: offset + size <= st_size, an off_t.
    const std::size_t length = static_cast<std::size_t>(lead + size);
    void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, flags, fd,
                      static_cast<off_t>(offset - lead));
    if (base == MAP_FAILED) {
        *err = errno;
        close(fd);
        return kMapFailed;
    }
    close(fd);  // the mapping stays; the descriptor is not needed any more
    const long guard = guard_register(base, length, also_mark);
    if (guard < 0) {
        munmap(base, length);
        return kGuardFailed;
    }
    out->guard = guard;
    out->base = base;
    out->length = length;
    out->data = static_cast<char*>(base) + lead;
    out->offset = offset;
    out->size = size;
    out->device = static_cast<std::uint64_t>(st.st_dev);
    out->inode = static_cast<std::uint64_t>(st.st_ino);
    return kMapped;
}

// Open the object `key` (`oflag`) and fstat it into *st: its descriptor, or -1 with *status
// and *err set.
inline int open_object(const char* key, int oflag, struct stat* st, MapStatus* status,
                       int* err) noexcept {
    const int fd = shm_open(key, oflag, 0);
    if (fd < 0) {
        *err = errno;
        *status = kOpenFailed;
        return -1;
    }
    if (fstat(fd, st) != 0) {
        *err = errno;
        close(fd);
        *status = kStatFailed;
        return -1;
    }
    return fd;
}

// Map [offset, offset + size) of the object `key` read/write into *out. On failure *out is
// left empty, nothing stays open, and *err holds errno where the status says so (else 0);
// *object_size is the object's size once fstat has read it (else 0).
inline MapStatus map_region(const char* key, std::uint64_t offset, std::uint64_t size,
                            Mapping* out, int* err, std::uint64_t* object_size) noexcept {
    *err = 0;
    *object_size = 0;
    *out = Mapping{};
    struct stat st;
    MapStatus status = kMapped;
    const int fd = open_object(key, O_RDWR, &st, &status, err);
    if (fd < 0) return status;
    *object_size = st.st_size > 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
    if (size == 0 || check_range(*object_size, offset, size) != kInRange) {
        close(fd);
        return kOutOfObject;
    }
    return map_open_object(fd, st, offset, size, MAP_SHARED, -1, out, err);
}

// Map [offset, offset + size) of a mapped region (offsets in the region) again, privately
// (copy-on-write) into *out: the pages are the client's until written, so a writable copy
// of a large input costs page-table entries rather than a copy of its bytes. The object is
// opened again by its name (regions hold no descriptor) and must be the very object the
// region maps (device and inode) and still hold the range; else kOutOfObject (the caller
// copies instead). The mapping is guarded on its own slot, whose faults mark the region's.
// Unchecked: the range must lie inside the region.
inline MapStatus map_private(const char* key, const Mapping& region, std::uint64_t offset,
                             std::uint64_t size, Mapping* out, int* err) noexcept {
    *err = 0;
    *out = Mapping{};
    struct stat st;
    MapStatus status = kMapped;
    const int fd = open_object(key, O_RDONLY, &st, &status, err);
    if (fd < 0) return status;
    const std::uint64_t object_offset = region.offset + offset;  // inside the object
    const std::uint64_t object_size = st.st_size > 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
    if (static_cast<std::uint64_t>(st.st_dev) != region.device ||
        static_cast<std::uint64_t>(st.st_ino) != region.inode || size == 0 ||
        check_range(object_size, object_offset, size) != kInRange) {
        close(fd);
        return kOutOfObject;
    }
    return map_open_object(fd, st, object_offset, size, MAP_PRIVATE, region.guard, out, err);
}

// Whether [src, src + n) lies in `copy` (a private mapping of the object `region` maps) and
// its bytes are the object's at offsets that [region offset, + n) overlaps: a copy from the
// one into the other would then read bytes it has already overwritten (the two alias the
// same pages through different addresses, which memmove cannot see).
inline bool aliases_object_range(const Mapping& copy, const void* src, std::size_t n,
                                 const Mapping& region, std::uint64_t offset) noexcept {
    if (copy.base == nullptr || copy.inode != region.inode || copy.device != region.device)
        return false;
    const std::uintptr_t begin = reinterpret_cast<std::uintptr_t>(copy.data);
    const std::uintptr_t source = reinterpret_cast<std::uintptr_t>(src);
    if (n == 0 || source < begin || source - begin >= copy.size) return false;
    const std::uint64_t source_start = copy.offset + (source - begin);  // in the object
    const std::uint64_t target_start = region.offset + offset;
    return source_start < target_start + n && target_start < source_start + n;
}

// Undo map_region(); a no-op on an empty mapping. Exactly once per mapped region.
inline void unmap_region(Mapping* mapping) noexcept {
    guard_unregister(mapping->guard);  // before the pages go: no fault can be ours after
    if (mapping->base != nullptr) munmap(mapping->base, mapping->length);
    *mapping = Mapping{};
}

// Whether no touch of the region has found its object shrunk (see fault_guard.h). A shrink
// is seen at the first touch of a page past the object's new end, not before.
inline bool region_backed(const Mapping& mapping) noexcept {
    return mapping.base != nullptr && !guard_truncated(mapping.guard);
}

// Copy n bytes from src to the region at offset. Unchecked: [offset, offset + n) must be
// inside the region. src may overlap the region (a model's output can be a view of its
// input in the same region), so this is a memmove.
inline void copy_into_unchecked(const Mapping& mapping, std::uint64_t offset, const void* src,
                                std::size_t n) noexcept {
    std::memmove(mapping.data + offset, src, n);
}

}  // namespace shm
}  // namespace pytriton
