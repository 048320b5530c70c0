"""The compiled HPACK codec (csrc/h2/hpack.pyx, RFC 7541): the RFC's own examples (Appendix
C), round trips against python-hyper's ``hpack`` package as the oracle in both directions,
and the malformed blocks every decoder must refuse."""

from __future__ import annotations

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytriton_core._native.hpack import (
    HeaderListTooLarge,
    HpackDecoder,
    HpackEncoder,
    HpackError,
)

Fields = list[tuple[bytes, bytes]]

REQUEST = [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/")]
AUTHORITY = (b":authority", b"www.example.com")
DATE_21 = (b"date", b"Mon, 21 Oct 2013 20:13:21 GMT")
LOCATION = (b"location", b"https://www.example.com")
PRIVATE = (b"cache-control", b"private")

# Appendix C.3 (without Huffman coding) and C.4 (with): three requests on one connection;
# each step is (fields, the table size after them)
REQUESTS = [
    ([*REQUEST, AUTHORITY], 57),
    ([*REQUEST, AUTHORITY, (b"cache-control", b"no-cache")], 110),
    (
        [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":path", b"/index.html"),
            AUTHORITY,
            (b"custom-key", b"custom-value"),
        ],
        164,
    ),
]
C3 = [
    "828684410f7777772e6578616d706c652e636f6d",
    "828684be58086e6f2d6361636865",
    "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
]
C4 = [
    "828684418cf1e3c2e5f23a6ba0ab90f4ff",
    "828684be5886a8eb10649cbf",
    "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
]
# Appendix C.5 (without Huffman coding) and C.6 (with): three responses, a table of 256 bytes
RESPONSES = [
    ([(b":status", b"302"), PRIVATE, DATE_21, LOCATION], 222),
    ([(b":status", b"307"), PRIVATE, DATE_21, LOCATION], 222),
    (
        [
            (b":status", b"200"),
            PRIVATE,
            (b"date", b"Mon, 21 Oct 2013 20:13:22 GMT"),
            LOCATION,
            (b"content-encoding", b"gzip"),
            (b"set-cookie", b"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
        ],
        215,
    ),
]
C5 = [
    "4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a3231"
    "20474d546e1768747470733a2f2f7777772e6578616d706c652e636f6d",
    "4803333037c1c0bf",
    "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a697077"
    "38666f6f3d4153444a4b48514b425a584f5157454f50495541585157454f49553b206d61782d616765"
    "3d333630303b2076657273696f6e3d31",
]
C6 = [
    "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad17"
    "1863c78f0b97c8e9ae82ae43d3",
    "4883640effc1c0bf",
    "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6"
    "c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
]
EXAMPLES = {"C.3": (C3, REQUESTS, 4096), "C.4": (C4, REQUESTS, 4096)}
EXAMPLES |= {"C.5": (C5, RESPONSES, 256), "C.6": (C6, RESPONSES, 256)}


@pytest.mark.parametrize(
    ("block", "fields", "table_size"),
    [
        (
            "400a637573746f6d2d6b65790d637573746f6d2d686561646572",
            [(b"custom-key", b"custom-header")],
            55,
        ),
        ("040c2f73616d706c652f70617468", [(b":path", b"/sample/path")], 0),
        ("100870617373776f726406736563726574", [(b"password", b"secret")], 0),
        ("82", [(b":method", b"GET")], 0),
    ],
    ids=["C.2.1", "C.2.2", "C.2.3", "C.2.4"],
)
def test_the_rfc_field_representations_decode(block: str, fields: Fields, table_size: int) -> None:
    decoder = HpackDecoder()
    assert decoder.decode(bytes.fromhex(block)) == fields
    assert decoder.table_size == table_size


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_rfc_examples_decode_in_sequence(example: str) -> None:
    blocks, steps, table_limit = EXAMPLES[example]
    decoder = HpackDecoder(max_table_size=table_limit)
    for block, (fields, table_size) in zip(blocks, steps, strict=True):
        assert decoder.decode(bytes.fromhex(block)) == fields
        assert decoder.table_size == table_size


# What this encoder writes for the examples' fields: the Huffman-coded blocks of C.4 and C.6,
# except in C.6.2, where "307" Huffman-codes to 3 bytes, no shorter than itself, so it stays
# a raw string as in C.5.2.
ENCODED = {"C.4": (C4, REQUESTS, 4096), "C.6": ([C6[0], C5[1], C6[2]], RESPONSES, 256)}


@pytest.mark.parametrize("example", ENCODED)
def test_the_encoder_writes_the_rfc_examples(example: str) -> None:
    blocks, steps, table_limit = ENCODED[example]
    encoder = HpackEncoder()
    size_update = b""
    if table_limit != 4096:
        encoder.set_max_table_size(table_limit)
        size_update = bytes.fromhex("3fe101")  # 256 with a 5-bit prefix (section 6.3, C.1.2)
    for block, (fields, table_size) in zip(blocks, steps, strict=True):
        assert encoder.encode(fields) == size_update + bytes.fromhex(block)
        assert encoder.table_size == table_size
        size_update = b""


def test_blocks_decode_from_bytearray_and_memoryview() -> None:
    block = bytes.fromhex(C4[0])
    assert HpackDecoder().decode(bytearray(block)) == REQUESTS[0][0]
    assert HpackDecoder().decode(memoryview(b"\0" + block)[1:]) == REQUESTS[0][0]
    assert HpackDecoder().decode(b"") == []


def test_an_indexed_field_decodes_to_the_tables_own_tuple() -> None:
    """No new objects for a repeated header: the static table's tuples, and the dynamic
    table's entries, are what decode returns."""
    decoder = HpackDecoder()
    first = decoder.decode(bytes.fromhex(C4[0]))
    second = decoder.decode(bytes.fromhex(C4[1]))
    assert first[0] is second[0]  # :method GET, static
    assert first[3] is second[3]  # :authority, dynamic


# --- the encoder's choices --------------------------------------------------------------

GRPC_RESPONSE = [(b":status", b"200"), (b"content-type", b"application/grpc")]
GRPC_TRAILERS = [(b"grpc-status", b"0"), (b"grpc-message", b"")]


def test_repeated_response_headers_become_one_byte_indexed_fields() -> None:
    encoder = HpackEncoder()
    blocks = [encoder.encode(GRPC_RESPONSE), encoder.encode(GRPC_TRAILERS)]
    # the table, newest first: grpc-message, grpc-status, content-type
    blocks += [encoder.encode(GRPC_RESPONSE), encoder.encode(GRPC_TRAILERS)]
    assert blocks[2] == bytes([0x80 | 8, 0x80 | 64])
    assert blocks[3] == bytes([0x80 | 63, 0x80 | 62])
    oracle = hpack.Decoder()
    decoded = [oracle.decode(block, raw=True) for block in blocks]
    assert decoded == [GRPC_RESPONSE, GRPC_TRAILERS] * 2


def test_no_index_and_large_fields_stay_out_of_the_table() -> None:
    encoder = HpackEncoder()
    message = (b"grpc-message", b"model 'x' is not ready")
    block = encoder.encode([message], no_index={b"grpc-message"})
    assert block[0] & 0xF0 == 0x00  # literal without indexing, literal name
    assert encoder.table_size == 0
    assert encoder.encode([message], no_index={b"grpc-message"}) == block
    large = (b"x-large", b"v" * 513)
    assert encoder.encode([large])[0] == 0x00
    assert encoder.table_size == 0
    fits = (b"x-fits", b"v" * (512 - len(b"x-fits")))
    assert encoder.encode([fits])[0] == 0x40
    assert encoder.table_size == 512 + 32
    decoder = hpack.Decoder()
    assert decoder.decode(block, raw=True) == [message]


def test_a_table_name_is_used_for_a_new_value() -> None:
    encoder = HpackEncoder()
    # content-type is static index 31: literal with incremental indexing, name index 31
    assert encoder.encode([(b"content-type", b"application/grpc")])[0] == 0x40 | 31
    # a name from the dynamic table (62 after one insertion)
    encoder.encode([(b"x-custom", b"a")])
    assert encoder.encode([(b"x-custom", b"b")])[0] == 0x40 | 62


def test_table_size_changes_signal_the_smallest_then_the_last() -> None:
    """Section 4.2: the smallest size set between two blocks, then the final one."""
    encoder = HpackEncoder()
    encoder.encode([(b"x-a", b"1")])
    encoder.set_max_table_size(0)
    encoder.set_max_table_size(100)
    assert encoder.table_size == 0  # evicted when the size fell
    block = encoder.encode([(b"x-a", b"1")])
    assert block[:3] == bytes([0x20, 0x3F, 100 - 31])
    encoder.set_max_table_size(100)  # no change: nothing to signal
    assert encoder.encode([(b"x-a", b"1")]) == bytes([0x80 | 62])
    encoder.set_max_table_size(50)
    assert encoder.encode([])[:2] == bytes([0x3F, 50 - 31])
    with pytest.raises(ValueError, match="table size"):
        encoder.set_max_table_size(-1)
    with pytest.raises(ValueError, match="table size"):
        encoder.set_max_table_size(1 << 32)


def test_the_encoder_takes_only_bytes_and_refuses_a_block_whole() -> None:
    """A block refused part-way would leave fields in the encoder's table that the peer's
    never got: the encoder checks every field before it changes anything."""
    encoder = HpackEncoder()
    encoder.set_max_table_size(1024)
    good = (b"x-good", b"1")
    with pytest.raises(TypeError, match="bytes"):
        encoder.encode([good, ("content-type", "application/grpc")])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        encoder.encode([good, (b"a", b"b", b"c")])  # type: ignore[list-item]
    assert encoder.table_size == 0
    with pytest.raises(TypeError):
        encoder.encode([good], no_index=3)  # type: ignore[arg-type]
    assert encoder.table_size == 0
    oracle = hpack.Decoder()
    oracle.max_allowed_table_size = 1024
    # the table size update is still owed, and lists are fields too
    block = encoder.encode([good, [b"a", b"b"]])  # type: ignore[list-item]
    assert block[0] == 0x3F
    assert oracle.decode(block, raw=True) == [good, (b"a", b"b")]
    assert oracle.decode(encoder.encode([good]), raw=True) == [good]


# --- round trips against python-hyper's hpack -------------------------------------------

_STATIC_NAMES = [name for name, _ in hpack.table.HeaderTable.STATIC_TABLE]
NAMES = st.one_of(
    st.sampled_from([*_STATIC_NAMES, b"grpc-status", b"grpc-message", b"x-custom"]),
    st.binary(min_size=1, max_size=12),
)
VALUES = st.one_of(
    st.sampled_from([b"", b"0", b"200", b"GET", b"application/grpc", b"gzip, deflate"]),
    st.binary(max_size=40),
    st.binary(min_size=500, max_size=600),
)
FIELDS = st.lists(st.tuples(NAMES, VALUES), max_size=12)
TABLE_SIZES = st.sampled_from([None, None, None, 0, 32, 64, 100, 256, 4096, 8192])
# blocks of fields, each after a table size change (None: none)
CONNECTIONS = st.lists(st.tuples(TABLE_SIZES, FIELDS), min_size=1, max_size=8)
NO_INDEX = st.sets(st.sampled_from([b"grpc-message", b"date", b"x-custom"]), max_size=2)


@settings(max_examples=300, deadline=None)
@given(connection=CONNECTIONS, no_index=NO_INDEX)
def test_what_this_encoder_writes_hpack_decodes(
    connection: list[tuple[int | None, Fields]], no_index: set[bytes]
) -> None:
    encoder = HpackEncoder()
    oracle = hpack.Decoder(max_header_list_size=1 << 30)
    for table_size, fields in connection:
        if table_size is not None:
            encoder.set_max_table_size(table_size)
            oracle.max_allowed_table_size = table_size
        block = encoder.encode(fields, no_index)
        assert [tuple(field) for field in oracle.decode(block, raw=True)] == fields
        assert encoder.table_size == oracle.header_table._current_size


@settings(max_examples=300, deadline=None)
@given(connection=CONNECTIONS, huffman=st.booleans(), sensitive=st.booleans())
def test_what_hpack_encodes_this_decoder_reads(
    connection: list[tuple[int | None, Fields]], huffman: bool, sensitive: bool
) -> None:
    oracle = hpack.Encoder()
    decoder = HpackDecoder(max_header_list_size=1 << 30)
    for table_size, fields in connection:
        # hpack's encoder signals a change only if the last one changed the size
        if table_size is not None and table_size != oracle.header_table_size:
            oracle.header_table_size = table_size
            decoder.max_table_size = table_size
        # every other field never indexed (section 6.2.3), when asked
        marked = [(n, v, sensitive and i % 2 == 1) for i, (n, v) in enumerate(fields)]
        block = oracle.encode(marked, huffman=huffman)
        assert decoder.decode(block) == fields
        assert decoder.table_size == oracle.header_table._current_size


@settings(max_examples=200, deadline=None)
@given(text=st.binary(max_size=300))
def test_huffman_strings_match_hpack_both_ways(text: bytes) -> None:
    """Every byte value's code, through a literal the encoder Huffman-codes whenever that is
    shorter, and through one hpack always Huffman-codes."""
    field = [(b"x", text)]
    assert hpack.Decoder().decode(HpackEncoder().encode(field), raw=True) == field
    assert HpackDecoder().decode(hpack.Encoder().encode(field, huffman=True)) == field


# --- malformed blocks -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("1f", "block ends inside an integer"),
        ("ff80", "block ends inside an integer"),
        ("ff808080808080", "longer than 6 octets"),
        ("ff808080801f", "integer over 4294967295"),
        ("80", "index 0"),
        ("be", "index 62 past the end of the table \\(61 entries\\)"),
        ("7f00", "index 63 past the end"),  # a literal's name index
        ("40", "block ends before a string"),
        ("4001", "string of 1 bytes past the end of the block"),
        ("400161", "block ends before a string"),
        ("4001610305", "string of 3 bytes past the end"),
        # EOS (30 ones) inside a Huffman-coded value
        ("00016184fffffffc", "contains EOS"),
        # 'a' (00011) then a full byte of ones: 11 bits of padding
        ("000161821fff", "padding longer than 7 bits"),
        # 'a' (00011) then 000: padding that is not ones
        ("00016181 18", "not a prefix of EOS"),
        ("3fe21f", "update to 4097, over the limit of 4096"),
        ("823f e11f", "after a header field"),
    ],
)
def test_malformed_blocks_are_refused(block: str, message: str) -> None:
    with pytest.raises(HpackError, match=message):
        HpackDecoder().decode(bytes.fromhex(block))


def test_a_size_update_above_the_limit_is_refused() -> None:
    decoder = HpackDecoder(max_table_size=256)
    assert decoder.decode(bytes.fromhex("3fe101")) == []  # 256: at the limit
    with pytest.raises(HpackError, match="update to 257, over the limit of 256"):
        decoder.decode(bytes.fromhex("3fe201"))


def test_a_lowered_limit_requires_a_size_update_first() -> None:
    decoder = HpackDecoder()
    decoder.decode(bytes.fromhex(C4[0]))
    decoder.max_table_size = 4096  # no change: nothing owed
    assert decoder.decode(b"\x82") == [(b":method", b"GET")]
    decoder.max_table_size = 0
    with pytest.raises(HpackError, match="no dynamic table size update"):
        decoder.decode(b"\x82")
    decoder = HpackDecoder()
    decoder.max_table_size = 1024
    assert decoder.decode(bytes.fromhex("3f e1 07 82")) == [(b":method", b"GET")]  # 1024
    assert decoder.decode(b"\x82") == [(b":method", b"GET")]
    decoder.max_table_size = 2048  # raised: the peer may keep its size
    assert decoder.decode(b"\x82") == [(b":method", b"GET")]
    with pytest.raises(ValueError, match="table size"):
        decoder.max_table_size = -1
    with pytest.raises(ValueError, match="negative"):
        decoder.max_header_list_size = -1


def test_a_header_list_too_large_is_decoded_to_the_end_first() -> None:
    """HeaderListTooLarge comes after the whole block: the table has its entries, and the
    next block (indexing them) decodes right."""
    big = (b"x-big", b"v" * 100)
    limit = 2 * (len(b"x-big") + 100 + 32)
    encoder = HpackEncoder()
    decoder = HpackDecoder(max_header_list_size=limit)
    assert decoder.decode(encoder.encode([big, big])) == [big, big]
    extra = (b"x-extra", b"1")
    with pytest.raises(HeaderListTooLarge, match=f"header list of {limit + 40} bytes"):
        decoder.decode(encoder.encode([big, big, extra]))
    assert decoder.table_size == encoder.table_size
    assert decoder.decode(encoder.encode([extra, big])) == [extra, big]
    assert issubclass(HeaderListTooLarge, HpackError)
