/* HPACK's Huffman code (RFC 7541 section 5.2 and Appendix B): encoding, and decoding four
 * bits at a time through a state machine built from the code once, at start-up. Plain C, no
 * Python.h; hpack.pyx is its one user (through huffman.pxd).
 *
 * The decoder's states are the inner nodes of the code's binary tree: a state stands for the
 * bits read since the last complete symbol (state 0, the root: none). From each state, each
 * of the 16 nibbles leads to a next state and emits at most one symbol: the shortest code
 * has 5 bits, so four bits can complete one code but never start and finish another.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

enum {
    HUFFMAN_SYMBOLS = 257, /* the 256 byte values, then EOS */
    HUFFMAN_EOS = 256,
    HUFFMAN_LONGEST = 30,  /* bits in the longest code (EOS's) */
    HUFFMAN_STATES = 256,  /* inner nodes of a complete tree with 257 leaves */
};

/* What huffman_decode() returns for a string that breaks section 5.2's rules. */
enum {
    HUFFMAN_HAS_EOS = -1,          /* the EOS symbol inside the string */
    HUFFMAN_PADDING_NOT_EOS = -2,  /* the last bits are not a prefix of EOS (all ones) */
    HUFFMAN_PADDING_TOO_LONG = -3, /* more than 7 bits of padding */
};

/* Appendix B's "len" column: each symbol's code length in bits. The code is canonical (the
 * codes of one length are consecutive in symbol order, and each length continues from the
 * last code of the one before, shifted left), so these lengths alone determine the codes;
 * huffman_build() checks the result is the complete code the RFC prints. */
static const uint8_t huffman_code_lengths[HUFFMAN_SYMBOLS] = {
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, /*   0 -  15 */
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, /*  16 -  31 */
    6,  10, 10, 12, 13, 6,  8,  11, 10, 10, 8,  11, 8,  6,  6,  6,  /*  32 -  47 */
    5,  5,  5,  6,  6,  6,  6,  6,  6,  6,  7,  8,  15, 6,  12, 10, /*  48 -  63 */
    13, 6,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  /*  64 -  79 */
    7,  7,  7,  7,  7,  7,  7,  7,  8,  7,  8,  13, 19, 13, 14, 6,  /*  80 -  95 */
    15, 5,  6,  5,  6,  5,  6,  6,  6,  5,  7,  7,  6,  6,  6,  5,  /*  96 - 111 */
    6,  7,  6,  5,  5,  6,  7,  7,  7,  7,  7,  15, 11, 14, 13, 28, /* 112 - 127 */
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, /* 128 - 143 */
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, /* 144 - 159 */
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, /* 160 - 175 */
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, /* 176 - 191 */
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, /* 192 - 207 */
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, /* 208 - 223 */
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, /* 224 - 239 */
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, /* 240 - 255 */
    30,                                                             /* EOS */
};

/* The codes, right-aligned; filled by huffman_build(). */
static uint32_t huffman_codes[HUFFMAN_SYMBOLS];

enum {
    HUFFMAN_EMITS = 1, /* this step completes a symbol */
    HUFFMAN_FAILS = 2, /* this step completes EOS: the string is malformed */
};

typedef struct {
    uint8_t next;   /* the state after the nibble */
    uint8_t flags;  /* HUFFMAN_EMITS, HUFFMAN_FAILS */
    uint8_t symbol; /* the byte completed, with HUFFMAN_EMITS */
} huffman_step;

static huffman_step huffman_steps[HUFFMAN_STATES][16];
/* Per state: how many bits it holds, and whether they are all ones. A string may end only
 * in a state whose bits are a prefix of EOS (all ones) no longer than 7 bits. */
static uint8_t huffman_state_bits[HUFFMAN_STATES];
static uint8_t huffman_state_all_ones[HUFFMAN_STATES];

/* Builds the codes and the decoder's steps from huffman_code_lengths. Returns 0, or -1 if
 * the lengths do not make a complete prefix code (the table was damaged). */
static int huffman_build(void) {
    /* children[node][bit]: > 0 an inner node (the root, 0, is nobody's child), < 0 the leaf
     * of symbol -child - 1, 0 not yet assigned */
    int16_t children[HUFFMAN_STATES][2] = {{0}};
    int nodes = 1;
    uint32_t code = 0;
    for (int length = 1; length <= HUFFMAN_LONGEST; length++) {
        for (int symbol = 0; symbol < HUFFMAN_SYMBOLS; symbol++) {
            if (huffman_code_lengths[symbol] == length) {
                huffman_codes[symbol] = code++;
            }
        }
        if (length < HUFFMAN_LONGEST) {
            code <<= 1;
        }
    }
    /* a complete code ends with the all-ones code of the longest length (EOS) */
    if (code != (1u << HUFFMAN_LONGEST) || huffman_codes[HUFFMAN_EOS] != code - 1) {
        return -1;
    }
    huffman_state_bits[0] = 0;
    huffman_state_all_ones[0] = 1;
    for (int symbol = 0; symbol < HUFFMAN_SYMBOLS; symbol++) {
        int length = huffman_code_lengths[symbol];
        int node = 0;
        for (int shift = length - 1; shift > 0; shift--) {
            int bit = (huffman_codes[symbol] >> shift) & 1;
            int child = children[node][bit];
            if (child < 0) {
                return -1; /* a shorter code is a prefix of this one */
            }
            if (child == 0) {
                if (nodes == HUFFMAN_STATES) {
                    return -1;
                }
                child = nodes++;
                children[node][bit] = (int16_t)child;
                huffman_state_bits[child] = (uint8_t)(huffman_state_bits[node] + 1);
                huffman_state_all_ones[child] = (uint8_t)(huffman_state_all_ones[node] && bit);
            }
            node = child;
        }
        int last = huffman_codes[symbol] & 1;
        if (children[node][last] != 0) {
            return -1;
        }
        children[node][last] = (int16_t)(-symbol - 1);
    }
    for (int state = 0; state < nodes; state++) {
        if (children[state][0] == 0 || children[state][1] == 0) {
            return -1; /* an incomplete code: some bit strings would decode to nothing */
        }
    }
    for (int state = 0; state < HUFFMAN_STATES; state++) {
        for (int nibble = 0; nibble < 16; nibble++) {
            huffman_step step = {0, 0, 0};
            int node = state;
            for (int shift = 3; shift >= 0; shift--) {
                int child = children[node][(nibble >> shift) & 1];
                if (child >= 0) {
                    node = child;
                    continue;
                }
                int symbol = -child - 1;
                if (symbol == HUFFMAN_EOS) {
                    step.flags = HUFFMAN_FAILS;
                    break;
                }
                step.flags = HUFFMAN_EMITS;
                step.symbol = (uint8_t)symbol;
                node = 0;
            }
            step.next = (uint8_t)node;
            huffman_steps[state][nibble] = step;
        }
    }
    return 0;
}

/* The most bytes huffman_decode() writes for n encoded bytes: every symbol takes 5 bits
 * or more. */
static inline size_t huffman_decoded_bound(size_t n) {
    return n * 8 / 5;
}

/* Decodes n bytes into out (room for huffman_decoded_bound(n) bytes). Returns the number
 * of bytes written, or one of the HUFFMAN_HAS_EOS... errors. */
static inline ptrdiff_t huffman_decode(const uint8_t* in, size_t n, uint8_t* out) {
    const uint8_t* end = in + n;
    uint8_t* start = out;
    uint8_t state = 0;
    while (in < end) {
        uint8_t byte = *in++;
        const huffman_step* high = &huffman_steps[state][byte >> 4];
        const huffman_step* low = &huffman_steps[high->next][byte & 0x0F];
        if ((high->flags | low->flags) & HUFFMAN_FAILS) {
            return HUFFMAN_HAS_EOS;
        }
        if (high->flags & HUFFMAN_EMITS) {
            *out++ = high->symbol;
        }
        if (low->flags & HUFFMAN_EMITS) {
            *out++ = low->symbol;
        }
        state = low->next;
    }
    if (!huffman_state_all_ones[state]) {
        return HUFFMAN_PADDING_NOT_EOS;
    }
    if (huffman_state_bits[state] > 7) {
        return HUFFMAN_PADDING_TOO_LONG;
    }
    return out - start;
}

/* The length in bytes of the encoding of n bytes, padding included. */
static inline size_t huffman_encoded_length(const uint8_t* in, size_t n) {
    uint64_t bits = 0;
    for (size_t i = 0; i < n; i++) {
        bits += huffman_code_lengths[in[i]];
    }
    return (size_t)((bits + 7) / 8);
}

/* Encodes n bytes into out (room for huffman_encoded_length() bytes), padding the last
 * byte with the most significant bits of EOS (ones). Returns the end of what it wrote. */
static inline uint8_t* huffman_encode(const uint8_t* in, size_t n, uint8_t* out) {
    /* bits not yet written sit at the bottom of pending; fewer than 8 between symbols, so
     * a 30-bit code never pushes them out of the 64 */
    uint64_t pending = 0;
    unsigned count = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned length = huffman_code_lengths[in[i]];
        pending = (pending << length) | huffman_codes[in[i]];
        count += length;
        while (count >= 8) {
            count -= 8;
            *out++ = (uint8_t)(pending >> count);
        }
    }
    if (count > 0) {
        *out++ = (uint8_t)((pending << (8 - count)) | (0xFFu >> count));
    }
    return out;
}
