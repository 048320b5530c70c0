// A SIGBUS guard for client regions mapped without a descriptor.
//
// A mapped region holds no file descriptor (one client registering hundreds of regions must
// not exhaust the process's descriptors), so the server cannot fstat the object before each
// use to see whether the client shrank it (ftruncate). Touching a mapped page past the
// object's end raises SIGBUS. Instead of checking, the server lets the touch happen and
// repairs it: one process-wide SIGBUS handler looks the faulting address up among the
// registered regions; inside one, it maps anonymous zero pages over the faulting page and the
// rest of the region (MAP_FIXED, private), marks the region truncated and returns, so the
// access completes (reads see zeros, writes go nowhere). The request that was using the
// region then fails with a clear error when its owner checks the mark; later uses are
// refused. A fault anywhere else goes to the handler that was installed before (or to the
// default action, which ends the process as it would have).
//
// Zero-copy stays: inputs remain views over the mapping and the normal path pays nothing
// (no syscall per use; the mark is one atomic load).
//
// Signal-handler safety: the handler only reads atomics and calls mmap (a system call on
// Linux). The table of regions is a fixed array of lazily allocated chunks that are never
// freed, so the handler can walk it while other threads register and unregister (under a
// mutex, outside any handler). A slot is published with its bounds before its region is
// handed out, and cleared before its region is unmapped.
//
// The handler and the table are process-wide by nature (a signal disposition is), so they
// are the one piece of global state in the compiled helpers.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <vector>

namespace pytriton {
namespace shm {

struct GuardSlot {
    std::atomic<std::uintptr_t> begin{0};  // page aligned; 0: free
    std::atomic<std::uintptr_t> end{0};    // page aligned, exclusive
    std::atomic<std::uintptr_t> anonymous_from{0};  // pages from here on are anonymous
    std::atomic<int> truncated{0};
    // A private copy-on-write mapping of a registered region's object is guarded in a slot
    // of its own; a fault in it marks the region's slot as well (-1: none).
    std::atomic<long> also_mark{-1};
};

constexpr std::size_t kGuardChunk = 1024;
constexpr std::size_t kGuardChunks = 4096;  // 4 Mi regions at most

struct GuardTable {
    std::atomic<GuardSlot*> chunks[kGuardChunks] = {};
    std::atomic<std::size_t> used_chunks{0};
    std::mutex lock;               // registration only, never taken by the handler
    std::vector<long> free_slots;  // under lock
    std::size_t next_slot = 0;     // under lock
    struct sigaction previous = {};
    std::uintptr_t page = 4096;  // set before the handler is first installed
    bool installed = false;      // under lock
    // `previous` replaced this guard once (e.g. faulthandler.enable() after the first
    // region) and may chain back to it: after calling it, fall back to the default action.
    bool previous_may_chain_back = false;
};

inline GuardTable& guard_table() noexcept {
    static GuardTable table;  // never destroyed before the process ends
    return table;
}

inline GuardSlot* guard_slot(long index) noexcept {
    GuardTable& table = guard_table();
    GuardSlot* chunk = table.chunks[static_cast<std::size_t>(index) / kGuardChunk].load(
        std::memory_order_acquire);
    return chunk + static_cast<std::size_t>(index) % kGuardChunk;
}

inline void chain_to_previous(int signal_number, siginfo_t* info, void* context) noexcept {
    const GuardTable& table = guard_table();
    const struct sigaction& previous = table.previous;
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction != nullptr) {
            previous.sa_sigaction(signal_number, info, context);
            if (!table.previous_may_chain_back) return;
        }
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN &&
               previous.sa_handler != nullptr) {
        previous.sa_handler(signal_number);
        if (!table.previous_may_chain_back) return;
    }
    // The default action (a synchronous fault cannot be ignored): restore it and return, so
    // that the faulting instruction runs again and ends the process as it would have. Also
    // after a previous handler that may hand the fault back here: no endless loop.
    struct sigaction fallback = {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(signal_number, &fallback, nullptr);
}

inline void on_sigbus(int signal_number, siginfo_t* info, void* context) noexcept {
    GuardTable& table = guard_table();
    const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(info->si_addr);
    const std::size_t chunks = table.used_chunks.load(std::memory_order_acquire);
    for (std::size_t c = 0; c < chunks; ++c) {
        GuardSlot* chunk = table.chunks[c].load(std::memory_order_acquire);
        if (chunk == nullptr) continue;
        for (std::size_t i = 0; i < kGuardChunk; ++i) {
            GuardSlot& slot = chunk[i];
            const std::uintptr_t begin = slot.begin.load(std::memory_order_acquire);
            const std::uintptr_t end = slot.end.load(std::memory_order_acquire);
            if (begin == 0 || address < begin || address >= end) continue;
            const std::uintptr_t page = address & ~(table.page - 1);
            const std::uintptr_t limit = slot.anonymous_from.load(std::memory_order_acquire);
            if (page < limit) {
                void* mapped = mmap(reinterpret_cast<void*>(page), limit - page,
                                    PROT_READ | PROT_WRITE,
                                    MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (mapped == MAP_FAILED) break;  // cannot repair: as if unguarded
                slot.anonymous_from.store(page, std::memory_order_release);
            }
            slot.truncated.store(1, std::memory_order_release);
            const long also = slot.also_mark.load(std::memory_order_acquire);
            if (also >= 0) guard_slot(also)->truncated.store(1, std::memory_order_release);
            return;  // the access runs again, on anonymous memory
        }
    }
    chain_to_previous(signal_number, info, context);
}

// Make on_sigbus the SIGBUS handler (again, if something replaced it since: the replaced
// handler becomes the one faults elsewhere go to). Call with table.lock held.
inline bool install_guard_locked(GuardTable& table) noexcept {
    struct sigaction current = {};
    if (sigaction(SIGBUS, nullptr, &current) != 0) return false;
    if (table.installed && (current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_sigbus)
        return true;
    const long page = sysconf(_SC_PAGESIZE);
    table.page = page > 0 ? static_cast<std::uintptr_t>(page) : 4096;
    struct sigaction guard = {};
    guard.sa_sigaction = on_sigbus;
    guard.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&guard.sa_mask);
    struct sigaction previous = {};
    if (sigaction(SIGBUS, &guard, &previous) != 0) return false;
    table.previous_may_chain_back = table.installed;  // something replaced the guard
    table.previous = previous;
    table.installed = true;
    return true;
}

// Guard [base, base + length) (a mapping's exact extent); a fault in it also marks slot
// `also_mark` (a live slot, or -1). Returns the slot, or -1 when the handler cannot be
// installed or the table is full.
inline long guard_register(void* base, std::size_t length, long also_mark = -1) noexcept {
    GuardTable& table = guard_table();
    std::lock_guard<std::mutex> hold(table.lock);
    if (!install_guard_locked(table)) return -1;
    const std::uintptr_t page = table.page;
    const std::uintptr_t begin = reinterpret_cast<std::uintptr_t>(base);
    const std::uintptr_t end = (begin + length + page - 1) & ~(page - 1);
    long index = -1;
    if (!table.free_slots.empty()) {
        index = table.free_slots.back();
        table.free_slots.pop_back();
    } else {
        if (table.next_slot >= kGuardChunk * kGuardChunks) return -1;
        index = static_cast<long>(table.next_slot++);
        const std::size_t c = static_cast<std::size_t>(index) / kGuardChunk;
        if (table.chunks[c].load(std::memory_order_relaxed) == nullptr) {
            GuardSlot* chunk = new (std::nothrow) GuardSlot[kGuardChunk];
            if (chunk == nullptr) {
                --table.next_slot;
                return -1;
            }
            table.chunks[c].store(chunk, std::memory_order_release);
            table.used_chunks.store(c + 1, std::memory_order_release);
        }
    }
    GuardSlot* slot = guard_slot(index);
    slot->truncated.store(0, std::memory_order_relaxed);
    slot->also_mark.store(also_mark, std::memory_order_relaxed);
    slot->anonymous_from.store(end, std::memory_order_relaxed);
    slot->end.store(end, std::memory_order_relaxed);
    slot->begin.store(begin, std::memory_order_release);  // published last
    return index;
}

// Stop guarding a slot; before its mapping is unmapped.
inline void guard_unregister(long index) noexcept {
    if (index < 0) return;
    GuardTable& table = guard_table();
    GuardSlot* slot = guard_slot(index);
    slot->begin.store(0, std::memory_order_release);
    slot->end.store(0, std::memory_order_release);
    std::lock_guard<std::mutex> hold(table.lock);
    try {
        table.free_slots.push_back(index);
    } catch (...) {
        // Out of memory: the slot is not reused, nothing else is lost.
    }
}

// Whether a fault in the slot's region found its object shrunk.
inline bool guard_truncated(long index) noexcept {
    return index >= 0 && guard_slot(index)->truncated.load(std::memory_order_acquire) != 0;
}

}  // namespace shm
}  // namespace pytriton
