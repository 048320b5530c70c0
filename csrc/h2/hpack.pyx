# cython: language_level=3, boundscheck=False, wraparound=False
"""HPACK (RFC 7541), the header compression of HTTP/2: a decoder for the header blocks a
client sends, one per connection, and an encoder.

Compiled: every gRPC call decodes one block, and a repeated request block is mostly one-byte
indexed fields, so the cost is the per-field overhead, which a Python loop would multiply.
The server does not use the encoder: the connection (h2_connection.pyx) sends constant
response blocks of literals and needs no dynamic table. The encoder serves the decoder's
tests and fuzz target, and bench/micro_hpack.py.

A field is a (name, value) tuple of bytes. The tables hold those tuples themselves: an indexed
field decodes to the very tuple stored in its table (the static table's are built once, at
import), so a repeated header creates no object. The dynamic table is a ring of the tuples.

A malformed block raises HpackError. The decoder's table may then be out of step with the
peer's, so the connection must end (COMPRESSION_ERROR, RFC 9113 section 4.3).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport (
    PyBytes_AS_STRING,
    PyBytes_CheckExact,
    PyBytes_FromStringAndSize,
    PyBytes_GET_SIZE,
)
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.ref cimport PyObject, Py_DECREF, Py_INCREF, Py_XDECREF
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_ITEM
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport memcpy

from huffman cimport (
    HUFFMAN_HAS_EOS,
    HUFFMAN_PADDING_NOT_EOS,
    HUFFMAN_PADDING_TOO_LONG,
    huffman_build,
    huffman_decode,
    huffman_decoded_bound,
    huffman_encode,
    huffman_encoded_length,
)

cdef enum:
    _ENTRY_OVERHEAD = 32  # added to an entry's name and value lengths (section 4.1)
    _STATIC_COUNT = 61
    _DEFAULT_TABLE_SIZE = 4096  # SETTINGS_HEADER_TABLE_SIZE's initial value (RFC 9113)
    _DEFAULT_MAX_HEADER_LIST_SIZE = 65536
    # Section 5.1 leaves the integers' limits to the implementation. 2**32 - 1 is the largest
    # HTTP/2 setting, and 6 octets carry it after any prefix; longer encodings (of zeros)
    # are refused, as python-hyper's hpack refuses them.
    _INTEGER_OCTETS = 6
    # The encoder indexes no field whose name and value pass this many bytes together: one
    # such field would push most others out of a table of the default 4096 bytes.
    _LARGEST_INDEXED_FIELD = 512

cdef uint64_t _LARGEST_INTEGER = 0xFFFFFFFF


class HpackError(Exception):
    """A malformed header block: the connection must end with COMPRESSION_ERROR."""


class HeaderListTooLarge(HpackError):
    """A header block that decoded (the dynamic table is in step with the peer's) to a header
    list over max_header_list_size."""


if huffman_build() != 0:
    raise ImportError("csrc/h2/huffman.h: the code lengths do not make a complete code")

# Appendix A; index 1 first
cdef tuple _STATIC_TABLE = (
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
)
assert len(_STATIC_TABLE) == _STATIC_COUNT

# The encoder's lookups in the static table: each field's index, and each name's first one.
cdef dict _STATIC_INDEX = {field: index for index, field in enumerate(_STATIC_TABLE, 1)}
cdef dict _STATIC_NAME_INDEX = {}
for _index, (_name, _value) in enumerate(_STATIC_TABLE, 1):
    _STATIC_NAME_INDEX.setdefault(_name, _index)
del _index, _name, _value

cdef dict _HUFFMAN_ERRORS = {
    HUFFMAN_HAS_EOS: "Huffman-coded string contains EOS",
    HUFFMAN_PADDING_NOT_EOS: "Huffman padding is not a prefix of EOS (all ones)",
    HUFFMAN_PADDING_TOO_LONG: "Huffman padding longer than 7 bits",
}


cdef inline Py_ssize_t _entry_size(tuple field) noexcept:
    return (PyBytes_GET_SIZE(<object>PyTuple_GET_ITEM(field, 0))
            + PyBytes_GET_SIZE(<object>PyTuple_GET_ITEM(field, 1))
            + _ENTRY_OVERHEAD)


cdef tuple _checked_field(object header):
    """``header`` as a field tuple of two bytes objects, or TypeError or ValueError."""
    name, value = header
    if not (PyBytes_CheckExact(name) and PyBytes_CheckExact(value)):
        raise TypeError(f"a header's name and value are bytes, not {header!r}")
    return <tuple>header if PyTuple_CheckExact(header) else (name, value)


cdef int _grow_buffer(uint8_t** buffer, Py_ssize_t* size, Py_ssize_t needed) except -1:
    """Grows ``buffer[0]``, of ``size[0]`` bytes, to hold at least ``needed`` bytes."""
    cdef uint8_t* grown
    if needed <= size[0]:
        return 0
    needed = max(needed, 2 * size[0], 256)
    grown = <uint8_t*>PyMem_Realloc(buffer[0], needed)
    if grown is NULL:
        raise MemoryError()
    buffer[0] = grown
    size[0] = needed
    return 0


cdef int _check_table_size(Py_ssize_t size) except -1:
    if size < 0 or <uint64_t>size > _LARGEST_INTEGER:
        raise ValueError(f"a table size is 0 to {_LARGEST_INTEGER}, not {size}")
    return 0


cdef inline int _read_integer(const uint8_t* data, Py_ssize_t* pos, Py_ssize_t end,
                              int prefix_bits, uint64_t* value) except -1:
    """Reads an integer with a prefix of ``prefix_bits`` (section 5.1) at ``pos[0]``, which
    it moves past the integer. Unchecked: ``pos[0]`` < ``end``.

    Inline for the one-byte case, nearly every integer of a block; the rest is a call."""
    cdef uint64_t prefix_max = (<uint64_t>1 << prefix_bits) - 1
    cdef uint64_t prefix = data[pos[0]] & prefix_max
    pos[0] += 1
    if prefix < prefix_max:
        value[0] = prefix
        return 0
    return _read_integer_continuation(data, pos, end, prefix, value)


cdef int _read_integer_continuation(const uint8_t* data, Py_ssize_t* pos, Py_ssize_t end,
                                    uint64_t result, uint64_t* value) except -1:
    cdef Py_ssize_t last = pos[0] + _INTEGER_OCTETS - 1
    cdef int shift = 0
    cdef uint8_t byte
    while True:
        if pos[0] >= end:
            raise HpackError("block ends inside an integer")
        if pos[0] == last:
            raise HpackError(f"integer longer than {_INTEGER_OCTETS} octets")
        byte = data[pos[0]]
        pos[0] += 1
        result += (<uint64_t>(byte & 0x7F)) << shift
        if result > _LARGEST_INTEGER:
            raise HpackError(f"integer over {_LARGEST_INTEGER}")
        if byte < 0x80:
            value[0] = result
            return 0
        shift += 7


cdef class _DynamicTable:
    """The dynamic table (sections 2.3.2 and 4): field tuples whose sizes sum to at most
    ``max_size``, in a ring of owned references; age 0 is the newest entry (index 62)."""

    cdef PyObject** _ring
    cdef Py_ssize_t _mask  # the ring's capacity (a power of two) - 1
    cdef Py_ssize_t _newest  # the slot of age 0
    cdef Py_ssize_t count
    cdef Py_ssize_t size  # the entries' sizes summed
    cdef Py_ssize_t max_size
    # Entries ever added: the entry of age a is entry number added - 1 - a. Numbers name an
    # entry for as long as it lives, while its age and index grow with every addition.
    cdef uint64_t added

    def __cinit__(self, Py_ssize_t max_size):
        self._ring = <PyObject**>PyMem_Malloc(16 * sizeof(PyObject*))
        if self._ring is NULL:
            raise MemoryError()
        self._mask = 15
        self._newest = 15  # the first entry goes in slot 0
        self.max_size = max_size

    def __dealloc__(self):
        cdef Py_ssize_t age
        if self._ring is NULL:
            return
        for age in range(self.count):
            Py_XDECREF(self._ring[self._slot(age)])
        PyMem_Free(self._ring)

    cdef inline Py_ssize_t _slot(self, Py_ssize_t age) noexcept:
        return (self._newest + self._mask + 1 - age) & self._mask

    cdef inline tuple field(self, Py_ssize_t age):
        """Unchecked: ``age`` < ``count``."""
        return <tuple>self._ring[self._slot(age)]

    cdef int add(self, tuple field) except -1:
        cdef Py_ssize_t size = _entry_size(field)
        if size > self.max_size:
            # not an error: an entry larger than the table empties it (section 4.4)
            self._evict_to(0)
            return 0
        self._evict_to(self.max_size - size)
        if self.count == self._mask + 1:
            self._grow()
        self._newest = (self._newest + 1) & self._mask
        Py_INCREF(field)
        self._ring[self._newest] = <PyObject*>field
        self.count += 1
        self.size += size
        self.added += 1
        return 0

    cdef int resize(self, Py_ssize_t max_size) except -1:
        self.max_size = max_size
        return self._evict_to(max_size)

    cdef int _evict_to(self, Py_ssize_t limit) except -1:
        """Drops the oldest entries until the sizes sum to at most ``limit``."""
        cdef Py_ssize_t slot
        cdef PyObject* oldest
        while self.size > limit:
            slot = self._slot(self.count - 1)
            oldest = self._ring[slot]
            self._ring[slot] = NULL
            self.count -= 1
            self.size -= _entry_size(<tuple>oldest)
            try:
                self._evicted(<tuple>oldest, self.added - 1 - <uint64_t>self.count)
            finally:
                Py_DECREF(<object>oldest)
        return 0

    cdef int _evicted(self, tuple field, uint64_t number) except -1:
        """A hook for subclasses: entry ``number`` has left the table."""
        return 0

    cdef int _grow(self) except -1:
        cdef Py_ssize_t capacity = 2 * (self._mask + 1)
        cdef PyObject** ring = <PyObject**>PyMem_Malloc(capacity * sizeof(PyObject*))
        cdef Py_ssize_t age
        if ring is NULL:
            raise MemoryError()
        for age in range(self.count):  # oldest at slot 0, newest at count - 1
            ring[self.count - 1 - age] = self._ring[self._slot(age)]
        PyMem_Free(self._ring)
        self._ring = ring
        self._mask = capacity - 1
        self._newest = self.count - 1
        return 0


cdef class _EncoderTable(_DynamicTable):
    """The encoder's dynamic table, with what it looks up: the newest entry of each field
    and of each name, by entry number."""

    cdef dict field_numbers
    cdef dict name_numbers

    def __cinit__(self, Py_ssize_t max_size):
        self.field_numbers = {}
        self.name_numbers = {}

    cdef inline Py_ssize_t index_of(self, object number):
        return _STATIC_COUNT + 1 + <Py_ssize_t>(self.added - 1 - <uint64_t>number)

    cdef int remember(self, tuple field) except -1:
        """Adds a field that fits in the table (one that does not would empty it)."""
        self.add(field)
        number = self.added - 1
        self.field_numbers[field] = number
        self.name_numbers[<object>PyTuple_GET_ITEM(field, 0)] = number
        return 0

    cdef int _evicted(self, tuple field, uint64_t number) except -1:
        # a newer entry of the same field or name may have taken the lookup over
        name = <object>PyTuple_GET_ITEM(field, 0)
        if self.field_numbers.get(field) == number:
            del self.field_numbers[field]
        if self.name_numbers.get(name) == number:
            del self.name_numbers[name]
        return 0


cdef class HpackDecoder:
    """Decodes the header blocks of one connection, in the order they arrive."""

    cdef _DynamicTable _table
    cdef Py_ssize_t _max_table_size
    cdef Py_ssize_t _max_header_list_size
    # The limit fell below the size of the table in effect: the peer must shrink the table
    # at the start of its next block (section 4.2).
    cdef bint _size_update_due
    cdef uint8_t* _scratch  # Huffman-decoded strings, before they become bytes
    cdef Py_ssize_t _scratch_size

    def __cinit__(self, Py_ssize_t max_table_size=_DEFAULT_TABLE_SIZE,
                  Py_ssize_t max_header_list_size=_DEFAULT_MAX_HEADER_LIST_SIZE):
        _check_table_size(max_table_size)
        self._table = _DynamicTable(max_table_size)
        self._max_table_size = max_table_size
        self.max_header_list_size = max_header_list_size

    def __dealloc__(self):
        PyMem_Free(self._scratch)

    @property
    def max_table_size(self):
        """The largest table size the peer may set: our SETTINGS_HEADER_TABLE_SIZE, once
        acknowledged. Also the table's size at the start, when the connection passes the
        protocol's initial 4096 and lowers it only after the acknowledgement."""
        return self._max_table_size

    @max_table_size.setter
    def max_table_size(self, Py_ssize_t size):
        _check_table_size(size)
        self._max_table_size = size
        self._size_update_due = self._table.max_size > size

    @property
    def max_header_list_size(self):
        """Our SETTINGS_MAX_HEADER_LIST_SIZE."""
        return self._max_header_list_size

    @max_header_list_size.setter
    def max_header_list_size(self, Py_ssize_t size):
        if size < 0:
            raise ValueError(f"max_header_list_size is negative: {size}")
        self._max_header_list_size = size

    @property
    def table_size(self):
        """The dynamic table's size (its entries' sizes summed, section 4.1)."""
        return self._table.size

    def decode(self, block):
        """The fields of one complete header block (its HEADERS and CONTINUATION payloads
        joined), as (name, value) tuples of bytes in their order."""
        cdef Py_buffer view
        PyObject_GetBuffer(block, &view, PyBUF_SIMPLE)
        try:
            return self._decode(<const uint8_t*>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)

    cdef list _decode(self, const uint8_t* data, Py_ssize_t end):
        cdef list fields = []
        cdef Py_ssize_t pos = 0
        cdef Py_ssize_t list_size = 0  # RFC 9113's header list size, section 6.5.2
        cdef bint fields_started = False
        cdef uint64_t number
        cdef uint8_t first
        cdef tuple field
        while pos < end:
            first = data[pos]
            if first & 0x80:  # indexed field (section 6.1)
                _read_integer(data, &pos, end, 7, &number)
                field = self._indexed(number)
            elif first & 0x40:  # literal field with incremental indexing (6.2.1)
                _read_integer(data, &pos, end, 6, &number)
                field = self._literal(data, &pos, end, number)
                self._table.add(field)
            elif first & 0x20:  # dynamic table size update (6.3)
                if fields_started:
                    raise HpackError("dynamic table size update after a header field")
                _read_integer(data, &pos, end, 5, &number)
                if number > <uint64_t>self._max_table_size:
                    raise HpackError(f"dynamic table size update to {number}, over the "
                                     f"limit of {self._max_table_size}")
                self._table.resize(<Py_ssize_t>number)
                self._size_update_due = False
                continue
            else:  # literal field without indexing (6.2.2) or never indexed (6.2.3)
                _read_integer(data, &pos, end, 4, &number)
                field = self._literal(data, &pos, end, number)
            if not fields_started:
                if self._size_update_due:
                    raise HpackError("no dynamic table size update at the start of the "
                                     "block after the table's limit was lowered")
                fields_started = True
            # Past the limit the block is still decoded to its end, to keep the table in
            # step, but the fields are no longer kept.
            list_size += _entry_size(field)
            if list_size <= self._max_header_list_size:
                fields.append(field)
        if list_size > self._max_header_list_size:
            raise HeaderListTooLarge(f"header list of {list_size} bytes, over the limit of "
                                     f"{self._max_header_list_size}")
        return fields

    cdef inline tuple _indexed(self, uint64_t index):
        if 0 < index <= _STATIC_COUNT:
            return <tuple>PyTuple_GET_ITEM(_STATIC_TABLE, index - 1)
        if _STATIC_COUNT < index <= _STATIC_COUNT + <uint64_t>self._table.count:
            return self._table.field(<Py_ssize_t>(index - _STATIC_COUNT - 1))
        self._refuse_index(index)

    cdef int _refuse_index(self, uint64_t index) except -1:
        if index == 0:
            raise HpackError("index 0")
        raise HpackError(f"index {index} past the end of the table "
                         f"({_STATIC_COUNT + self._table.count} entries)")

    cdef tuple _literal(self, const uint8_t* data, Py_ssize_t* pos, Py_ssize_t end,
                        uint64_t name_index):
        """A literal field's name (given by ``name_index`` if not 0) and value."""
        if name_index:
            name = <object>PyTuple_GET_ITEM(self._indexed(name_index), 0)
        else:
            name = self._string(data, pos, end)
        return (name, self._string(data, pos, end))

    cdef bytes _string(self, const uint8_t* data, Py_ssize_t* pos, Py_ssize_t end):
        """A string literal (section 5.2)."""
        cdef uint64_t length
        cdef Py_ssize_t start
        cdef ptrdiff_t decoded
        cdef bint huffman
        if pos[0] >= end:
            raise HpackError("block ends before a string")
        huffman = data[pos[0]] & 0x80
        _read_integer(data, pos, end, 7, &length)
        if length > <uint64_t>(end - pos[0]):
            raise HpackError(f"string of {length} bytes past the end of the block")
        start = pos[0]
        pos[0] += <Py_ssize_t>length
        if not huffman:
            return PyBytes_FromStringAndSize(<const char*>data + start, <Py_ssize_t>length)
        _grow_buffer(&self._scratch, &self._scratch_size, huffman_decoded_bound(length))
        decoded = huffman_decode(data + start, length, self._scratch)
        if decoded < 0:
            raise HpackError(_HUFFMAN_ERRORS[decoded])
        return PyBytes_FromStringAndSize(<const char*>self._scratch, decoded)


cdef class HpackEncoder:
    """Encodes the header blocks of one connection, in the order they are sent.

    A field is sent as an index when a table holds it; otherwise as a literal with its name
    indexed where a table holds the name, added to the dynamic table unless its name is in
    ``no_index`` or it is large; a string Huffman-coded where that is shorter.
    """

    cdef _EncoderTable _table
    cdef Py_ssize_t _signalled_size  # the table size the peer's decoder knows
    cdef Py_ssize_t _smallest_size_set  # since the last block; -1: no size set
    cdef uint8_t* _out
    cdef Py_ssize_t _out_size
    cdef Py_ssize_t _length  # written to _out so far

    def __cinit__(self):
        self._table = _EncoderTable(_DEFAULT_TABLE_SIZE)
        self._signalled_size = _DEFAULT_TABLE_SIZE
        self._smallest_size_set = -1

    def __dealloc__(self):
        PyMem_Free(self._out)

    @property
    def table_size(self):
        """The dynamic table's size (its entries' sizes summed, section 4.1)."""
        return self._table.size

    def set_max_table_size(self, Py_ssize_t size):
        """Use a table of ``size`` bytes, the peer's SETTINGS_HEADER_TABLE_SIZE. The change
        is signalled at the start of the next block."""
        _check_table_size(size)
        self._table.resize(size)
        if self._smallest_size_set < 0 or size < self._smallest_size_set:
            self._smallest_size_set = size

    def encode(self, headers, no_index=()):
        """One header block of ``headers``, (name, value) pairs of bytes; the fields named
        in ``no_index`` never enter the dynamic table."""
        # Every field is checked before the table changes: a block given up half-way would
        # leave entries in this table that the peer's never got.
        cdef list fields = [_checked_field(header) for header in headers]
        cdef list unindexed = None
        cdef Py_ssize_t i
        if no_index:
            unindexed = [<object>PyTuple_GET_ITEM(field, 0) in no_index for field in fields]
        self._length = 0
        self._signal_table_size()
        for i in range(len(fields)):
            self._encode_field(<tuple>fields[i], unindexed is not None and unindexed[i])
        return PyBytes_FromStringAndSize(<const char*>self._out, self._length)

    cdef int _signal_table_size(self) except -1:
        """Section 4.2: after one or more changes, the smallest size set, then the last."""
        cdef Py_ssize_t last = self._table.max_size
        if self._smallest_size_set < 0:
            return 0
        self._reserve(2 * _INTEGER_OCTETS)
        if self._smallest_size_set < last:
            self._write_integer(0x20, 5, self._smallest_size_set)
            self._write_integer(0x20, 5, last)
        elif last != self._signalled_size:
            self._write_integer(0x20, 5, last)
        self._signalled_size = last
        self._smallest_size_set = -1
        return 0

    cdef int _encode_field(self, tuple field, bint unindexed) except -1:
        name = <object>PyTuple_GET_ITEM(field, 0)
        cdef Py_ssize_t length = _entry_size(field) - _ENTRY_OVERHEAD  # name and value
        # the representation, two string lengths, the strings (never longer Huffman-coded)
        self._reserve(3 * _INTEGER_OCTETS + length)
        index = _STATIC_INDEX.get(field)
        if index is not None:
            self._write_integer(0x80, 7, index)
            return 0
        number = self._table.field_numbers.get(field)
        if number is not None:
            self._write_integer(0x80, 7, self._table.index_of(number))
            return 0
        cdef Py_ssize_t name_index = _STATIC_NAME_INDEX.get(name, 0)
        if name_index == 0:
            number = self._table.name_numbers.get(name)
            if number is not None:
                name_index = self._table.index_of(number)
        cdef bint indexing = (
            not unindexed
            and length <= _LARGEST_INDEXED_FIELD
            and length + _ENTRY_OVERHEAD <= self._table.max_size
        )
        if indexing:
            self._write_integer(0x40, 6, name_index)
        else:
            self._write_integer(0x00, 4, name_index)
        if name_index == 0:
            self._write_string(name)
        self._write_string(<bytes>PyTuple_GET_ITEM(field, 1))
        if indexing:
            self._table.remember(field)
        return 0

    cdef inline void _write_integer(self, uint8_t pattern, int prefix_bits,
                                    uint64_t value) noexcept:
        """Unchecked: the buffer has room for ``_INTEGER_OCTETS``."""
        cdef uint64_t prefix_max = (<uint64_t>1 << prefix_bits) - 1
        cdef uint8_t* out = self._out + self._length
        cdef Py_ssize_t written = 1
        if value < prefix_max:
            out[0] = pattern | <uint8_t>value
        else:
            out[0] = pattern | <uint8_t>prefix_max
            value -= prefix_max
            while value >= 0x80:
                out[written] = <uint8_t>(value & 0x7F) | 0x80
                value >>= 7
                written += 1
            out[written] = <uint8_t>value
            written += 1
        self._length += written

    cdef inline void _write_string(self, bytes text) noexcept:
        """Unchecked: the buffer has room for the length and ``text``."""
        cdef const uint8_t* raw = <const uint8_t*>PyBytes_AS_STRING(text)
        cdef Py_ssize_t length = PyBytes_GET_SIZE(text)
        cdef Py_ssize_t coded = huffman_encoded_length(raw, length)
        if coded < length:
            self._write_integer(0x80, 7, coded)
            huffman_encode(raw, length, self._out + self._length)
            self._length += coded
        else:
            self._write_integer(0x00, 7, length)
            memcpy(self._out + self._length, raw, length)
            self._length += length

    cdef inline int _reserve(self, Py_ssize_t size) except -1:
        """Room for ``size`` more bytes in the buffer."""
        return _grow_buffer(&self._out, &self._out_size, self._length + size)
