# cython: language_level=3
# HPACK's Huffman code in C (huffman.h): the contract hpack.pyx binds.

from libc.stddef cimport ptrdiff_t
from libc.stdint cimport uint8_t


cdef extern from "huffman.h" nogil:
    enum:
        HUFFMAN_HAS_EOS
        HUFFMAN_PADDING_NOT_EOS
        HUFFMAN_PADDING_TOO_LONG

    # Builds the codes and the decode tables; -1 if the code lengths are not a complete
    # prefix code. Called once, at import, before anything else here.
    int huffman_build() noexcept
    size_t huffman_decoded_bound(size_t n) noexcept
    # Unchecked: out must hold huffman_decoded_bound(n) bytes. The count written, or a
    # HUFFMAN_... error (< 0).
    ptrdiff_t huffman_decode(const uint8_t* data, size_t n, uint8_t* out) noexcept
    size_t huffman_encoded_length(const uint8_t* data, size_t n) noexcept
    # Unchecked: out must hold huffman_encoded_length(data, n) bytes. The end written.
    uint8_t* huffman_encode(const uint8_t* data, size_t n, uint8_t* out) noexcept
