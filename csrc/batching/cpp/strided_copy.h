// Strided-to-contiguous copies for gathering a batch: pure data movement, no Python.h.
//
// Contract: every source describes a valid numpy-style array (data points at element
// [0, ..., 0]; strides in bytes, any sign, zero allowed) whose memory stays alive and
// unmodified for the duration of the call; the destination holds the sum of the sources'
// byte sizes and does not overlap any source. The functions never fail and may run
// without the GIL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pytriton {
namespace batching {

// numpy's NPY_MAXDIMS (64 since numpy 2.0)
constexpr int kMaxDims = 64;

struct StridedSource {
    const char* data;
    int ndim;
    const std::intptr_t* shape;
    const std::intptr_t* strides;
};

namespace detail {

// A fixed-size memcpy compiles to one load and one store: an element copy without a call.
template <std::size_t N>
inline char* copy_elements(char* dst, const char* src, std::intptr_t count,
                           std::intptr_t stride) noexcept {
    for (std::intptr_t i = 0; i < count; ++i, src += stride, dst += N) {
        std::memcpy(dst, src, N);
    }
    return dst;
}

inline char* copy_elements_any(char* dst, const char* src, std::intptr_t count,
                               std::intptr_t stride, std::size_t itemsize) noexcept {
    switch (itemsize) {
        case 1: return copy_elements<1>(dst, src, count, stride);
        case 2: return copy_elements<2>(dst, src, count, stride);
        case 4: return copy_elements<4>(dst, src, count, stride);
        case 8: return copy_elements<8>(dst, src, count, stride);
        case 16: return copy_elements<16>(dst, src, count, stride);
        default:
            for (std::intptr_t i = 0; i < count; ++i, src += stride, dst += itemsize) {
                std::memcpy(dst, src, itemsize);
            }
            return dst;
    }
}

}  // namespace detail

// Copy one source into dst in C order; returns the number of bytes written.
inline std::size_t copy_to_contiguous(const StridedSource& src, std::size_t itemsize,
                                      char* dst) noexcept {
    // Drop length-1 axes (their stride is meaningless) and merge each axis into the one
    // inside it when they walk memory as one axis, so that a C-contiguous source becomes a
    // single memcpy and a sliced one a memcpy per contiguous row.
    std::intptr_t shape[kMaxDims];
    std::intptr_t strides[kMaxDims];
    int nd = 0;
    std::size_t count = 1;
    for (int axis = 0; axis < src.ndim; ++axis) {
        const std::intptr_t n = src.shape[axis];
        if (n == 0) return 0;
        count *= static_cast<std::size_t>(n);
        if (n == 1) continue;
        if (nd > 0 && strides[nd - 1] == src.strides[axis] * n) {
            shape[nd - 1] *= n;
            strides[nd - 1] = src.strides[axis];
        } else {
            shape[nd] = n;
            strides[nd] = src.strides[axis];
            ++nd;
        }
    }
    const std::size_t nbytes = count * itemsize;
    if (nbytes == 0) return 0;
    if (nd == 0 || (nd == 1 && strides[0] == static_cast<std::intptr_t>(itemsize))) {
        std::memcpy(dst, src.data, nbytes);
        return nbytes;
    }

    // The innermost axis is a run: one memcpy when its elements are adjacent, an element
    // loop otherwise (transposed, stepped, negative or zero strides).
    const std::intptr_t inner_n = shape[nd - 1];
    const std::intptr_t inner_stride = strides[nd - 1];
    const bool inner_contiguous = inner_stride == static_cast<std::intptr_t>(itemsize);
    const std::size_t run_bytes = static_cast<std::size_t>(inner_n) * itemsize;

    // An odometer over the outer axes; src.data is element [0, ..., 0], so negative strides
    // need no special case.
    const int outer = nd - 1;
    std::intptr_t index[kMaxDims] = {0};
    const char* p = src.data;
    char* out = dst;
    for (;;) {
        if (inner_contiguous) {
            std::memcpy(out, p, run_bytes);
            out += run_bytes;
        } else {
            out = detail::copy_elements_any(out, p, inner_n, inner_stride, itemsize);
        }
        int axis = outer - 1;
        for (; axis >= 0; --axis) {
            p += strides[axis];
            if (++index[axis] < shape[axis]) break;
            p -= strides[axis] * shape[axis];
            index[axis] = 0;
        }
        if (axis < 0) break;
    }
    return nbytes;
}

// Copy the sources back to back into dst: the concatenation along axis 0.
inline void gather_unchecked(const StridedSource* sources, std::size_t count,
                             std::size_t itemsize, char* dst) noexcept {
    for (std::size_t i = 0; i < count; ++i) {
        dst += copy_to_contiguous(sources[i], itemsize, dst);
    }
}

// The byte range [*lo, *hi) a source can touch; used to refuse an `out` that overlaps it.
inline void byte_extent(const StridedSource& src, std::size_t itemsize, std::uintptr_t* lo,
                        std::uintptr_t* hi) noexcept {
    std::intptr_t low = 0;
    std::intptr_t high = static_cast<std::intptr_t>(itemsize);
    for (int axis = 0; axis < src.ndim; ++axis) {
        if (src.shape[axis] == 0) {
            *lo = *hi = reinterpret_cast<std::uintptr_t>(src.data);
            return;
        }
        const std::intptr_t span = (src.shape[axis] - 1) * src.strides[axis];
        if (span < 0) low += span; else high += span;
    }
    *lo = reinterpret_cast<std::uintptr_t>(src.data) + low;
    *hi = reinterpret_cast<std::uintptr_t>(src.data) + high;
}

}  // namespace batching
}  // namespace pytriton
