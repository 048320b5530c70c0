"""HPACK, the header compression of HTTP/2 (RFC 7541) (csrc/h2/hpack.pyx).

A decoder per connection, called once per header block, in the order of the blocks on
the wire (the server sends constant blocks and does not use the encoder, which the tests,
the fuzz target and bench/micro_hpack.py use)::

    decoder = HpackDecoder()  # SETTINGS_HEADER_TABLE_SIZE 4096, the protocol's initial one
    try:
        fields = decoder.decode(block)  # HEADERS + CONTINUATION payloads joined
    except HeaderListTooLarge:
        ...  # refuse the stream (RST_STREAM, or HTTP 431); the connection goes on
    except HpackError:
        ...  # end the connection: GOAWAY with COMPRESSION_ERROR

    encoder = HpackEncoder()
    encoder.set_max_table_size(peer_settings_header_table_size)  # when the peer's SETTINGS come
    block = encoder.encode([(b":status", b"200"), (b"content-type", b"application/grpc")])

Fields are (name, value) tuples of bytes. The decoder does not check HTTP's rules on names
(lower case, pseudo-header order): that is the connection's job.
"""

from collections.abc import Container, Sequence

class HpackError(Exception):
    """A malformed header block: the connection must end with COMPRESSION_ERROR."""

class HeaderListTooLarge(HpackError):
    """A block decoded to its end (the dynamic table is in step with the peer's) whose header
    list (each field's name and value lengths + 32, summed) passes max_header_list_size."""

class HpackDecoder:
    def __init__(self, max_table_size: int = 4096, max_header_list_size: int = 65536) -> None:
        """``max_table_size`` is also the size of the table in effect at the start."""

    @property
    def max_table_size(self) -> int:
        """The largest table size the peer may set (our SETTINGS_HEADER_TABLE_SIZE, set
        once acknowledged); set below the table's size in effect, the peer's next block must
        open with a table size update."""

    @max_table_size.setter
    def max_table_size(self, size: int) -> None: ...
    @property
    def max_header_list_size(self) -> int:
        """Our SETTINGS_MAX_HEADER_LIST_SIZE."""

    @max_header_list_size.setter
    def max_header_list_size(self, size: int) -> None: ...
    @property
    def table_size(self) -> int:
        """The dynamic table's size now (its entries' sizes, RFC 7541 section 4.1)."""

    def decode(self, block: bytes | bytearray | memoryview) -> list[tuple[bytes, bytes]]:
        """Raises HpackError (HeaderListTooLarge) for a block it refuses."""

class HpackEncoder:
    def __init__(self) -> None: ...
    @property
    def table_size(self) -> int:
        """The dynamic table's size now (its entries' sizes, RFC 7541 section 4.1)."""

    def set_max_table_size(self, size: int) -> None:
        """The peer's SETTINGS_HEADER_TABLE_SIZE: the table shrinks at once, and the next
        block opens with the table size update(s) that tell the peer."""

    def encode(
        self, headers: Sequence[tuple[bytes, bytes]], no_index: Container[bytes] = ()
    ) -> bytes:
        """A field in a table is sent as its index; any other is a literal, added to the
        dynamic table unless its name is in ``no_index`` or the field passes 512 bytes.
        TypeError (a name or value not bytes) or ValueError (not a pair) leave the encoder
        as it was."""
