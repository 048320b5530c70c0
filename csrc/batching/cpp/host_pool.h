// A thread-safe pool of page-aligned host buffers in power-of-two size classes: pure data
// movement, no Python.h.
//
// Ownership: acquire() hands out a buffer of at least the requested size together with its
// capacity (the size class); the caller gives it back exactly once with release(ptr,
// capacity). Released buffers are cached for reuse up to max_cached_bytes; beyond that they
// go back to the allocator. The pool must outlive its buffers (the Cython layer holds it
// through a shared_ptr in every buffer).
//
// Where the memory comes from is a strategy (HostAllocator), so that page-locked CUDA
// memory can back the same pool later without touching its callers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace pytriton {
namespace batching {

constexpr std::size_t kPageSize = 4096;
constexpr int kMinClassLog2 = 12;  // 4 KiB
constexpr int kMaxClassLog2 = 46;  // 64 TiB: far above any host, below size_t overflow
constexpr int kClassCount = kMaxClassLog2 - kMinClassLog2 + 1;

// Where buffers come from. allocate() returns page-aligned memory or nullptr; both calls
// may run on any thread, without the GIL.
class HostAllocator {
  public:
    virtual ~HostAllocator() = default;
    virtual void* allocate(std::size_t nbytes) noexcept = 0;
    virtual void deallocate(void* ptr, std::size_t nbytes) noexcept = 0;
    // What stats() reports as memory_kind: "pageable", later "pinned".
    virtual const char* kind() const noexcept = 0;
};

class PageableAllocator final : public HostAllocator {
  public:
    void* allocate(std::size_t nbytes) noexcept override {
        void* ptr = nullptr;
        return posix_memalign(&ptr, kPageSize, nbytes) == 0 ? ptr : nullptr;
    }
    void deallocate(void* ptr, std::size_t) noexcept override { std::free(ptr); }
    const char* kind() const noexcept override { return "pageable"; }
};

struct PoolStats {
    std::uint64_t allocations;  // fresh allocator calls
    std::uint64_t reuses;       // acquires served from the cache
    std::uint64_t frees;        // buffers handed back to the allocator
    std::size_t cached_bytes;   // capacity held in the cache
    std::size_t in_use_bytes;   // capacity handed out and not yet released
    std::size_t max_cached_bytes;
};

class HostPool {
  public:
    HostPool(std::unique_ptr<HostAllocator> allocator, std::size_t max_cached_bytes)
        : allocator_(std::move(allocator)), max_cached_bytes_(max_cached_bytes) {}

    HostPool(const HostPool&) = delete;
    HostPool& operator=(const HostPool&) = delete;

    ~HostPool() { trim(); }

    // The size class for nbytes: its index, with *capacity set; -1 when too large.
    static int size_class(std::size_t nbytes, std::size_t* capacity) noexcept {
        for (int log2 = kMinClassLog2; log2 <= kMaxClassLog2; ++log2) {
            const std::size_t size = std::size_t{1} << log2;
            if (nbytes <= size) {
                *capacity = size;
                return log2 - kMinClassLog2;
            }
        }
        return -1;
    }

    // A buffer of at least nbytes and its capacity; nullptr when too large or out of memory.
    void* acquire(std::size_t nbytes, std::size_t* capacity) noexcept {
        const int cls = size_class(nbytes, capacity);
        if (cls < 0) return nullptr;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            std::vector<void*>& cached = free_[cls];
            if (!cached.empty()) {
                void* ptr = cached.back();
                cached.pop_back();
                cached_bytes_ -= *capacity;
                in_use_bytes_ += *capacity;
                ++reuses_;
                return ptr;
            }
        }
        // Outside the lock: a large allocation must not stall other threads' reuse.
        void* ptr = allocator_->allocate(*capacity);
        if (ptr == nullptr) return nullptr;
        std::lock_guard<std::mutex> lock(mutex_);
        in_use_bytes_ += *capacity;
        ++allocations_;
        return ptr;
    }

    // Give back a buffer from acquire(), with the capacity it came with. Exactly once.
    void release(void* ptr, std::size_t capacity) noexcept {
        std::size_t unused;
        const int cls = size_class(capacity, &unused);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            in_use_bytes_ -= capacity;
            if (cached_bytes_ + capacity <= max_cached_bytes_) {
                try {
                    free_[cls].push_back(ptr);
                    cached_bytes_ += capacity;
                    return;
                } catch (const std::bad_alloc&) {
                    // no room to remember it: free it below instead
                }
            }
            ++frees_;
        }
        allocator_->deallocate(ptr, capacity);
    }

    // Free every cached buffer; returns the bytes handed back to the allocator.
    std::size_t trim() noexcept {
        std::vector<void*> drained[kClassCount];
        std::size_t freed;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            for (int cls = 0; cls < kClassCount; ++cls) {
                drained[cls].swap(free_[cls]);
                frees_ += drained[cls].size();
            }
            freed = cached_bytes_;
            cached_bytes_ = 0;
        }
        for (int cls = 0; cls < kClassCount; ++cls) {
            for (void* ptr : drained[cls]) {
                allocator_->deallocate(ptr, std::size_t{1} << (cls + kMinClassLog2));
            }
        }
        return freed;
    }

    PoolStats stats() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        return PoolStats{allocations_, reuses_, frees_, cached_bytes_, in_use_bytes_,
                         max_cached_bytes_};
    }

    const char* memory_kind() const noexcept { return allocator_->kind(); }

  private:
    const std::unique_ptr<HostAllocator> allocator_;
    const std::size_t max_cached_bytes_;
    std::mutex mutex_;
    std::vector<void*> free_[kClassCount];
    std::uint64_t allocations_ = 0;
    std::uint64_t reuses_ = 0;
    std::uint64_t frees_ = 0;
    std::size_t cached_bytes_ = 0;
    std::size_t in_use_bytes_ = 0;
};

// The pool over plain page-aligned host memory (posix_memalign).
inline std::shared_ptr<HostPool> make_pageable_pool(std::size_t max_cached_bytes) {
    return std::make_shared<HostPool>(std::make_unique<PageableAllocator>(), max_cached_bytes);
}

}  // namespace batching
}  // namespace pytriton
