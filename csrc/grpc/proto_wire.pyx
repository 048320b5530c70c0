# cython: language_level=3, autotestdict=False, boundscheck=False, wraparound=False
"""The protobuf wire format by hand, for the repeated ``bytes`` fields that carry tensors.

``ModelInferRequest.raw_input_contents`` and ``ModelInferResponse.raw_output_contents`` hold
the tensor data. Through protobuf each entry would be copied twice on the way in (into the
message's arena when parsing, into a new ``bytes`` on every access) and twice on the way out
(into the arena on append, into the output on serialize). Here the request's entries become
memoryviews over the received bytes, and a response's entries are written once, from the
tensors' own memory, after the serialized header message. Everything else in the messages
still goes through protobuf: the two forms concatenate, as the wire format allows.

Compiled: the walk over a request's top-level fields and the tags and lengths of a
response's entries run for every gRPC inference (a dozen varints each), which in Python
were some 15 function calls per request (profile in docs/benchmarks.md).
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.string cimport memcpy

cdef enum:
    _VARINT = 0
    _I64 = 1
    _LEN = 2
    _START_GROUP = 3
    _END_GROUP = 4
    _I32 = 5
    _MAX_GROUP_DEPTH = 100  # protobuf's own recursion limit


class WireError(ValueError):
    """The received bytes are not a well-formed protobuf message."""


cdef inline Py_ssize_t _varint(const unsigned char* data, Py_ssize_t pos, Py_ssize_t end,
                               unsigned long long* value, int longest) noexcept:
    """The position after a varint of at most ``longest`` bytes, or -1."""
    cdef unsigned long long result = 0
    cdef int shift = 0
    cdef unsigned char byte
    while pos < end and shift < 7 * longest:
        byte = data[pos]
        pos += 1
        result |= (<unsigned long long>(byte & 0x7F)) << shift
        if byte < 0x80:
            value[0] = result
            return pos
        shift += 7
    return -1


cdef inline Py_ssize_t _read_varint(const unsigned char* data, Py_ssize_t pos, Py_ssize_t end,
                                    unsigned long long* value) except -1:
    pos = _varint(data, pos, end, value, 10)
    if pos < 0:
        raise WireError("malformed varint")
    return pos


cdef Py_ssize_t _skip_group(const unsigned char* data, Py_ssize_t pos, Py_ssize_t end,
                            unsigned long long field_number, int depth) except -1:
    """The position after the end-group tag that closes ``field_number``'s group."""
    cdef unsigned long long tag, length
    cdef int wire_type
    if depth > _MAX_GROUP_DEPTH:
        raise WireError("groups nested too deeply")
    while pos < end:
        pos = _read_varint(data, pos, end, &tag)
        wire_type = tag & 7
        if wire_type == _VARINT:
            pos = _read_varint(data, pos, end, &length)
        elif wire_type == _I64:
            pos += 8
        elif wire_type == _LEN:
            pos = _read_varint(data, pos, end, &length)
            if length > <unsigned long long>(end - pos):
                pos = end + 1  # past the end: the group is truncated
            else:
                pos += <Py_ssize_t>length
        elif wire_type == _I32:
            pos += 4
        elif wire_type == _START_GROUP:
            pos = _skip_group(data, pos, end, tag >> 3, depth + 1)
        elif wire_type == _END_GROUP:
            if tag >> 3 != field_number:
                raise WireError("mismatched end of group")
            return pos
        else:
            raise WireError(f"unsupported wire type {wire_type}")
    raise WireError("truncated group")


def split_field(bytes data not None, unsigned long long field_number):
    """Split out every entry of a length-delimited field: (the rest, the entries as views).

    Only the top level of the message is walked, field by field (a handful of steps for an
    infer request); the rest is left for protobuf to parse.
    """
    cdef unsigned long long wanted_tag = (field_number << 3) | _LEN
    cdef const unsigned char* p = data
    cdef Py_ssize_t end = len(data)
    cdef Py_ssize_t pos = 0, field_start, value_start, kept_from = 0
    cdef unsigned long long tag, length
    cdef int wire_type
    cdef list entries = []
    cdef list rest = []
    view = None
    while pos < end:
        field_start = pos
        pos = _read_varint(p, pos, end, &tag)
        value_start = pos
        wire_type = tag & 7
        if wire_type == _LEN:
            pos = _read_varint(p, pos, end, &length)
            value_start = pos
            if length > <unsigned long long>(end - pos):
                raise WireError("truncated message")
            pos += <Py_ssize_t>length
        elif wire_type == _VARINT:
            pos = _read_varint(p, pos, end, &length)
        elif wire_type == _I64:
            pos += 8
        elif wire_type == _I32:
            pos += 4
        elif wire_type == _START_GROUP:  # an unknown (proto2) group: skipped, as protobuf does
            pos = _skip_group(p, pos, end, tag >> 3, 1)
        else:
            raise WireError(f"unsupported wire type {wire_type}")
        if pos > end:
            raise WireError("truncated message")
        if tag == wanted_tag:
            if view is None:
                view = memoryview(data)
            if kept_from < field_start:
                rest.append(view[kept_from:field_start])
            entries.append(view[value_start:pos])
            kept_from = pos
    if not entries:
        return data, entries
    if kept_from < end:
        rest.append(view[kept_from:end])
    if len(rest) == 1:
        return rest[0], entries  # the usual case: the entries come last
    return b"".join(rest), entries


cdef inline Py_ssize_t _put_varint(unsigned char* out, unsigned long long value) noexcept:
    cdef Py_ssize_t n = 0
    while value >= 0x80:
        out[n] = <unsigned char>((value & 0x7F) | 0x80)
        value >>= 7
        n += 1
    out[n] = <unsigned char>value
    return n + 1


cpdef bytes field_prefix(unsigned long long field_number, unsigned long long size):
    """Tag and length of one length-delimited field entry of ``size`` bytes."""
    cdef unsigned char out[20]
    cdef Py_ssize_t n = _put_varint(out, (field_number << 3) | _LEN)
    n += _put_varint(out + n, size)
    return PyBytes_FromStringAndSize(<char*>out, n)


cdef inline Py_ssize_t _size(object buffer) except -1:
    if type(buffer) is bytes:
        return len(<bytes>buffer)
    if isinstance(buffer, memoryview):
        return (<memoryview>buffer).nbytes
    return len(buffer)


def append_field(list parts not None, unsigned long long field_number, entries):
    """Add one entry of a length-delimited field per buffer (empty ones included)."""
    for entry in entries:
        parts.append(field_prefix(field_number, _size(entry)))
        parts.append(entry)


def nest(list parts not None, unsigned long long field_number):
    """The serialized message ``parts`` as a field of an enclosing message."""
    cdef Py_ssize_t total = 0
    for part in parts:
        total += _size(part)
    return [field_prefix(field_number, total), *parts]


# ------------------------------------------------------------- ModelInferResponse header

# InferParameter's oneof members by the name the front ends give their kind.
cdef dict _PARAMETER_FIELDS = {
    "bool_param": 1, "int64_param": 2, "string_param": 3, "double_param": 4, "uint64_param": 5,
}


cdef inline void _put_tag_len(bytearray out, int field_number, Py_ssize_t size):
    cdef unsigned char buf[20]
    cdef Py_ssize_t n = _put_varint(buf, (field_number << 3) | _LEN)
    n += _put_varint(buf + n, <unsigned long long>size)
    out += buf[:n]


cdef inline void _put_string(bytearray out, int field_number, bytes value):
    _put_tag_len(out, field_number, len(value))
    out += value


cdef bytes _parameter_entry(str key, str kind, object value):
    """One entry of a ``map<string, InferParameter>``: key 1, value 2 (the oneof member
    set, even to its default value, as protobuf writes a set oneof)."""
    cdef bytearray parameter = bytearray()
    cdef unsigned char buf[20]
    cdef Py_ssize_t n
    cdef int field = _PARAMETER_FIELDS[kind]
    cdef double number
    if field == 3:
        _put_string(parameter, 3, (<str>value).encode())
    elif field == 4:
        number = value
        buf[0] = (4 << 3) | _I64
        memcpy(buf + 1, &number, 8)  # little-endian hosts: the wire's byte order
        parameter += buf[:9]
    else:
        buf[0] = (field << 3) | _VARINT
        if field == 2:  # int64: negative values as their 64-bit two's complement
            n = 1 + _put_varint(buf + 1, <unsigned long long>(<long long>value))
        else:
            n = 1 + _put_varint(buf + 1, <unsigned long long>value)
        parameter += buf[:n]
    cdef bytearray entry = bytearray()
    _put_string(entry, 1, key.encode())
    _put_tag_len(entry, 2, len(parameter))
    entry += parameter
    return bytes(entry)


def infer_response_header(str model_name not None, str model_version not None,
                          str request_id not None, parameters,
                          outputs):
    """A serialized ModelInferResponse without its raw contents, as protobuf writes it.

    ``parameters``: (key, member name such as ``"int64_param"``, value); ``outputs``:
    (name, datatype, shape). Replaces building the message through protobuf's Python
    objects (an ``outputs.add`` and a map assignment per field) on every inference.
    """
    cdef bytearray out = bytearray()
    cdef bytearray tensor
    cdef bytearray packed
    cdef unsigned char buf[10]
    cdef Py_ssize_t n
    if model_name:
        _put_string(out, 1, model_name.encode())
    if model_version:
        _put_string(out, 2, model_version.encode())
    if request_id:
        _put_string(out, 3, request_id.encode())
    for key, kind, value in parameters:
        _put_string(out, 4, _parameter_entry(key, kind, value))
    for name, datatype, shape in outputs:
        tensor = bytearray()
        if name:
            _put_string(tensor, 1, (<str>name).encode())
        if datatype:
            _put_string(tensor, 2, (<str>datatype).encode())
        if shape:
            packed = bytearray()
            for dim in shape:
                n = _put_varint(buf, <unsigned long long>(<long long>dim))
                packed += buf[:n]
            _put_tag_len(tensor, 3, len(packed))
            tensor += packed
        _put_tag_len(out, 5, len(tensor))
        out += tensor
    return bytes(out)


# ------------------------------------------------------------- ModelInferRequest walker

# The common ModelInferRequest, read straight from the wire: names, datatypes, shapes, the
# request's parameters of every InferParameter member, requested outputs by name, and the raw
# contents as views. Anything else (typed contents, a tensor's or an output's parameters,
# unknown fields, groups, 32-bit fields, 10-byte varints, malformed bytes, invalid UTF-8)
# makes the walk give up with None, and the caller parses the message with protobuf: its
# rules and error messages stay the only ones (tools/fuzz/grpc_infer.py checks that a
# message the walk accepts is one protobuf parses to the same fields).

from cpython.unicode cimport PyUnicode_DecodeUTF8


class _Unusual(Exception):
    """A field the walk leaves to protobuf."""


cdef struct _Field:
    unsigned long long number
    int wire_type
    Py_ssize_t start  # a length-delimited field: where its value starts
    unsigned long long value  # a varint's value, a length, or a fixed 64-bit field's bits


cdef inline Py_ssize_t _short_varint(const unsigned char* data, Py_ssize_t pos, Py_ssize_t end,
                                     unsigned long long* value) except -1:
    """A varint of at most 9 bytes (63 bits); a longer one is left to protobuf."""
    pos = _varint(data, pos, end, value, 9)
    if pos < 0:
        raise _Unusual()
    return pos


cdef Py_ssize_t _next_field(const unsigned char* data, Py_ssize_t pos, Py_ssize_t end,
                            _Field* field) except -1:
    cdef unsigned long long tag
    pos = _short_varint(data, pos, end, &tag)
    field.number = tag >> 3
    field.wire_type = tag & 7
    if field.number == 0:
        raise _Unusual()
    if field.wire_type == _VARINT:
        return _short_varint(data, pos, end, &field.value)
    if field.wire_type == _LEN:
        pos = _short_varint(data, pos, end, &field.value)
        if field.value > <unsigned long long>(end - pos):
            raise _Unusual()
        field.start = pos
        return pos + <Py_ssize_t>field.value
    if field.wire_type == _I64:
        if end - pos < 8:
            raise _Unusual()
        memcpy(&field.value, data + pos, 8)  # little-endian hosts: the wire's byte order
        return pos + 8
    raise _Unusual()


cdef inline str _text(const unsigned char* data, _Field* field):
    """A string field's value; invalid UTF-8 raises (protobuf refuses it in proto3)."""
    return PyUnicode_DecodeUTF8(<const char*>data + field.start, <Py_ssize_t>field.value, NULL)


cdef void _parameter(const unsigned char* data, Py_ssize_t pos, Py_ssize_t end,
                     dict parameters) except *:
    """One ``map<string, InferParameter>`` entry into ``parameters``: key -> (the oneof
    member's name or None, its value). Repeated keys: the last wins; a value given twice is
    merged, as protobuf does (the member set last wins)."""
    cdef _Field field, member
    cdef Py_ssize_t value_pos
    cdef double number
    key = ""
    which = None
    value = None
    while pos < end:
        pos = _next_field(data, pos, end, &field)
        if field.number == 1 and field.wire_type == _LEN:
            key = _text(data, &field)
        elif field.number == 2 and field.wire_type == _LEN:
            value_pos = field.start
            while value_pos < pos:
                value_pos = _next_field(data, value_pos, pos, &member)
                if member.number == 1 and member.wire_type == _VARINT:
                    which, value = "bool_param", member.value != 0
                elif member.number == 2 and member.wire_type == _VARINT:
                    which, value = "int64_param", <long long>member.value
                elif member.number == 3 and member.wire_type == _LEN:
                    which, value = "string_param", _text(data, &member)
                elif member.number == 4 and member.wire_type == _I64:
                    memcpy(&number, &member.value, 8)
                    which, value = "double_param", number
                elif member.number == 5 and member.wire_type == _VARINT:
                    which, value = "uint64_param", member.value
                else:
                    raise _Unusual()
        else:
            raise _Unusual()
    parameters[key] = (which, value)


cdef tuple _input(const unsigned char* data, Py_ssize_t pos, Py_ssize_t end):
    """An InferInputTensor without parameters or contents: (name, datatype, shape)."""
    cdef _Field field
    cdef Py_ssize_t dim_pos
    cdef unsigned long long dim
    name = ""
    datatype = ""
    cdef list shape = []
    while pos < end:
        pos = _next_field(data, pos, end, &field)
        if field.number == 1 and field.wire_type == _LEN:
            name = _text(data, &field)
        elif field.number == 2 and field.wire_type == _LEN:
            datatype = _text(data, &field)
        elif field.number == 3 and field.wire_type == _LEN:  # packed, as clients send it
            dim_pos = field.start
            while dim_pos < pos:
                dim_pos = _short_varint(data, dim_pos, pos, &dim)
                shape.append(<long long>dim)
        elif field.number == 3 and field.wire_type == _VARINT:
            shape.append(<long long>field.value)
        else:
            raise _Unusual()
    return name, datatype, shape


cdef str _output(const unsigned char* data, Py_ssize_t pos, Py_ssize_t end):
    """An InferRequestedOutputTensor without parameters: its name."""
    cdef _Field field
    name = ""
    while pos < end:
        pos = _next_field(data, pos, end, &field)
        if field.number == 1 and field.wire_type == _LEN:
            name = _text(data, &field)
        else:
            raise _Unusual()
    return name


def walk_infer_request(bytes data not None):
    """A common ModelInferRequest's fields, or None to leave the message to protobuf.

    (model_name, model_version, id, parameters: {key: (member name or None, value)} or
    None, inputs: [(name, datatype, shape)], outputs: [name], raw_input_contents as views).
    """
    cdef const unsigned char* p = data
    cdef Py_ssize_t end = len(data)
    cdef Py_ssize_t pos = 0
    cdef _Field field
    model_name = ""
    model_version = ""
    request_id = ""
    parameters = None
    cdef list inputs = []
    cdef list outputs = []
    cdef list raw = []
    view = None
    try:
        while pos < end:
            pos = _next_field(p, pos, end, &field)
            if field.wire_type != _LEN:
                raise _Unusual()
            if field.number == 7:
                if view is None:
                    view = memoryview(data)
                raw.append(view[field.start:pos])
            elif field.number == 5:
                inputs.append(_input(p, field.start, pos))
            elif field.number == 1:
                model_name = _text(p, &field)
            elif field.number == 2:
                model_version = _text(p, &field)
            elif field.number == 3:
                request_id = _text(p, &field)
            elif field.number == 4:
                if parameters is None:
                    parameters = {}
                _parameter(p, field.start, pos, parameters)
            elif field.number == 6:
                outputs.append(_output(p, field.start, pos))
            else:
                raise _Unusual()
    except (_Unusual, UnicodeDecodeError):
        return None
    return model_name, model_version, request_id, parameters, inputs, outputs, raw
