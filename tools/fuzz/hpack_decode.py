"""Fuzz the compiled HPACK decoder (``_native.hpack``) against python-hyper's ``hpack``
package, over several header blocks of one connection so that the dynamic table carries from
block to block.

The input: one byte choosing the table size both decoders allow (``TABLE_SIZES``), then
blocks, each a 2-byte big-endian length and that many bytes (the last one takes what is left
if fewer remain).

Oracles, block by block until one is refused:
- both decoders give the same fields and the same table size, or both refuse the block (the
  connection ends there); the compiled one raises only HpackError;
- the fields decoded, encoded by the compiled encoder, decode (with ``hpack``) to the same.

No difference between the two decoders is allowed. Where they differ in how they refuse, the
refusal is still the same: ``hpack`` ends a header list over its size limit at once, the
compiled decoder only after the block's end (to keep its table in step); and ``hpack``
accepts 6-octet integers up to 2**35 where the compiled one stops at 2**32 - 1, but at that
size an index, a string length or a table size update is refused by both.
"""

from __future__ import annotations

import sys

import instrumentation

# what this target fuzzes (instrumentation.py): the compiled module has no coverage
# counters, so the oracle's branches guide the search
SUBJECT = ("hpack", "pytriton_core._native.hpack")

with instrumentation.imports(SUBJECT):
    import hpack
    from common import fuzz

    from pytriton_core._native.hpack import HpackDecoder, HpackEncoder, HpackError

TABLE_SIZES = (4096, 256, 64, 0)


def blocks(data: bytes) -> list[bytes]:
    out, pos = [], 1
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 2], "big")
        out.append(data[pos + 2 : pos + 2 + length])
        pos += 2 + length
    return out


def test_one_input(data: bytes) -> None:
    if not data:
        return
    table_size = TABLE_SIZES[data[0] % len(TABLE_SIZES)]
    decoder = HpackDecoder(max_table_size=table_size)
    oracle = hpack.Decoder()
    oracle.header_table_size = oracle.max_allowed_table_size = table_size
    encoder = HpackEncoder()
    encoder.set_max_table_size(table_size)
    reader = hpack.Decoder()
    reader.max_allowed_table_size = table_size
    for block in blocks(data):
        try:
            expected = [tuple(field) for field in oracle.decode(block, raw=True)]
        except hpack.HPACKDecodingError:
            expected = None
        try:
            fields = decoder.decode(block)
        except HpackError:
            assert expected is None, (block, expected)
            return
        assert fields == expected, (block, fields, expected)
        assert decoder.table_size == oracle.header_table._current_size, block
        encoded = encoder.encode(fields)
        assert [tuple(field) for field in reader.decode(encoded, raw=True)] == fields


if __name__ == "__main__":
    fuzz(test_one_input, SUBJECT)
    sys.exit(0)
