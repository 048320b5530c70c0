# cython: language_level=3
"""Control messages of process mode written and read without pickle.

A bundle's requests and a worker's answer cross the worker's socket for every request
served in process mode, and pickle spent some 5,000 instructions per request served to
write them and as many to read them, on each side. These are trees of a few built-in
types, written here as a tag byte per value, lengths and numbers in the machine's byte
order (both ends are one host):

    N None   T True   F False   i int64   d float64
    s str (u32 length, UTF-8)   r the n-th str of the message again (u8 n)
    b bytes (u32 length)
    t tuple, l list (u32 count, items)   m dict (u32 count, key and value pairs)

A payload starts with ``FORMAT`` (pickle's start with 0x80, so a reader tells them apart).
Only exact built-in types are written, since a subclass (an enum, a numpy scalar) would
come back as its base type: ``encode`` returns None for anything else (or for ints past
int64, strings with lone surrogates, or nesting past ``_MAX_DEPTH``), and the caller
pickles that message. ``decode`` checks every length against the payload and raises
``ValueError`` on anything malformed.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Next, PyDict_SetItem
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_FromDouble
from cpython.list cimport PyList_New
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLongLong
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from cpython.tuple cimport PyTuple_New
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint32_t
from libc.string cimport memcpy, strerror

cdef extern from "Python.h":
    bint PyLong_CheckExact(object o)
    bint PyFloat_CheckExact(object o)
    bint PyUnicode_CheckExact(object o)
    bint PyBytes_CheckExact(object o)
    bint PyTuple_CheckExact(object o)
    bint PyList_CheckExact(object o)
    bint PyDict_CheckExact(object o)
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL
    Py_ssize_t PyDict_GET_SIZE "PyDict_Size"(object o)
    Py_ssize_t PySequence_Fast_GET_SIZE(object o)
    PyObject** PySequence_Fast_ITEMS(object o)

FORMAT = 1  # the first byte of every payload this module writes
cdef unsigned char _FORMAT = 1
cdef int _MAX_DEPTH = 32
cdef Py_ssize_t _MAX_LENGTH = 0xFFFFFFFF


# A message names one model, one datatype, one tensor... many times over: a str object
# seen before in the same message is written as a reference to it (as pickle's memo does),
# and the reader makes it once. By identity: the writer compares pointers, no hashing.
cdef enum:
    _KNOWN_STRINGS = 32


cdef struct _Writer:
    char* data
    Py_ssize_t size
    Py_ssize_t capacity
    PyObject* known[_KNOWN_STRINGS]
    int known_count


cdef int _reserve(_Writer* writer, Py_ssize_t more) except -1:
    cdef Py_ssize_t need = writer.size + more
    cdef Py_ssize_t capacity
    cdef char* grown
    if need <= writer.capacity:
        return 0
    capacity = writer.capacity * 2
    if capacity < need:
        capacity = need
    grown = <char*>PyMem_Realloc(writer.data, <size_t>capacity)
    if grown == NULL:
        raise MemoryError()
    writer.data = grown
    writer.capacity = capacity
    return 0


cdef inline int _put_byte(_Writer* writer, unsigned char value) except -1:
    _reserve(writer, 1)
    writer.data[writer.size] = <char>value
    writer.size += 1
    return 0


cdef inline int _put_sized(_Writer* writer, unsigned char tag, Py_ssize_t size) except -1:
    """``tag`` and a u32 size or count: 1, or 0 (nothing written) when ``size`` is past it."""
    cdef uint32_t word = <uint32_t>size
    if size > _MAX_LENGTH:
        return 0
    _reserve(writer, 5)
    writer.data[writer.size] = <char>tag
    memcpy(writer.data + writer.size + 1, &word, 4)  # the machine's order: one host
    writer.size += 5
    return 1


cdef inline int _put_bytes(_Writer* writer, const char* data, Py_ssize_t size) except -1:
    _reserve(writer, size)
    memcpy(writer.data + writer.size, data, <size_t>size)
    writer.size += size
    return 0


cdef int _write(_Writer* writer, object value, int depth) except -1:
    """1 when written, 0 when ``value`` (or a part) is not of the types written here."""
    cdef Py_ssize_t size, i
    cdef const char* text
    cdef int overflow = 0
    cdef long long number
    cdef double real
    cdef PyObject* key
    cdef PyObject* item
    cdef PyObject** items
    if depth > _MAX_DEPTH:
        return 0
    if value is None:
        _put_byte(writer, b'N')
    elif value is True:
        _put_byte(writer, b'T')
    elif value is False:
        _put_byte(writer, b'F')
    elif PyLong_CheckExact(value):
        number = PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow:
            return 0
        _put_byte(writer, b'i')
        _put_bytes(writer, <const char*>&number, 8)
    elif PyUnicode_CheckExact(value):
        for i in range(writer.known_count):
            if writer.known[i] == <PyObject*>value:
                _put_byte(writer, b'r')
                _put_byte(writer, <unsigned char>i)
                return 1
        if writer.known_count < _KNOWN_STRINGS:
            writer.known[writer.known_count] = <PyObject*>value  # alive: ``message`` holds it
            writer.known_count += 1
        text = PyUnicode_AsUTF8AndSize(value, &size)
        if not _put_sized(writer, b's', size):
            return 0
        _put_bytes(writer, text, size)
    elif PyTuple_CheckExact(value) or PyList_CheckExact(value):
        # Exact tuples and lists both keep their items in one array; nothing written here
        # runs Python code, so the list cannot change while it is walked.
        size = PySequence_Fast_GET_SIZE(value)
        if not _put_sized(writer, b't' if PyTuple_CheckExact(value) else b'l', size):
            return 0
        items = PySequence_Fast_ITEMS(value)
        for i in range(size):
            if not _write(writer, <object>items[i], depth + 1):
                return 0
    elif PyDict_CheckExact(value):
        size = PyDict_GET_SIZE(value)
        if not _put_sized(writer, b'm', size):
            return 0
        i = 0
        while PyDict_Next(value, &i, &key, &item):
            if not _write(writer, <object>key, depth + 1):
                return 0
            if not _write(writer, <object>item, depth + 1):
                return 0
    elif PyFloat_CheckExact(value):
        real = PyFloat_AS_DOUBLE(value)
        _put_byte(writer, b'd')
        _put_bytes(writer, <const char*>&real, 8)
    elif PyBytes_CheckExact(value):
        size = PyBytes_GET_SIZE(value)
        if not _put_sized(writer, b'b', size):
            return 0
        _put_bytes(writer, PyBytes_AS_STRING(value), size)
    else:
        return 0
    return 1


def encode(object message):
    """``message`` written as described above, or None when it holds anything else."""
    cdef _Writer writer
    writer.size = 0
    writer.known_count = 0
    writer.capacity = 256
    writer.data = <char*>PyMem_Malloc(<size_t>writer.capacity)
    if writer.data == NULL:
        raise MemoryError()
    try:
        _put_byte(&writer, _FORMAT)
        try:
            if not _write(&writer, message, 0):
                return None
        except UnicodeEncodeError:  # a lone surrogate: UTF-8 has none, pickle keeps it
            return None
        return PyBytes_FromStringAndSize(writer.data, writer.size)
    finally:
        PyMem_Free(writer.data)


cdef struct _Reader:
    const char* data
    Py_ssize_t size
    Py_ssize_t position
    PyObject* known[_KNOWN_STRINGS]  # owned references, released by ``decode``
    int known_count


cdef inline const char* _take(_Reader* reader, Py_ssize_t count) except NULL:
    cdef const char* at
    if count < 0 or count > reader.size - reader.position:
        raise ValueError("a control message ends before its contents")
    at = reader.data + reader.position
    reader.position += count
    return at


cdef inline Py_ssize_t _take_u32(_Reader* reader) except -1:
    cdef uint32_t word
    memcpy(&word, _take(reader, 4), 4)
    return <Py_ssize_t>word


cdef inline Py_ssize_t _take_count(_Reader* reader) except -1:
    """A tuple's, list's or dict's count, no more than the bytes left (an item takes one at
    least), so a hostile count allocates nothing past the payload's size."""
    cdef Py_ssize_t count = _take_u32(reader)
    if count > reader.size - reader.position:
        raise ValueError("a control message ends before its contents")
    return count


cdef object _read(_Reader* reader, int depth):
    cdef char tag
    cdef Py_ssize_t size, i
    cdef int64_t number
    cdef double real
    cdef const char* at
    cdef object result, key, item
    cdef PyObject** items
    if depth > _MAX_DEPTH:
        raise ValueError("a control message nests too deep")
    tag = _take(reader, 1)[0]
    if tag == b'N':
        return None
    if tag == b'T':
        return True
    if tag == b'F':
        return False
    if tag == b'i':
        memcpy(&number, _take(reader, 8), 8)
        return PyLong_FromLongLong(number)
    if tag == b's':
        size = _take_u32(reader)
        at = _take(reader, size)
        result = PyUnicode_DecodeUTF8(at, size, "strict")
        if reader.known_count < _KNOWN_STRINGS:
            Py_INCREF(result)
            reader.known[reader.known_count] = <PyObject*>result
            reader.known_count += 1
        return result
    if tag == b'r':
        i = <unsigned char>_take(reader, 1)[0]
        if i >= reader.known_count:
            raise ValueError("a control message refers to a string it has not held")
        return <object>reader.known[i]
    if tag == b't' or tag == b'l':
        size = _take_count(reader)
        result = PyTuple_New(size) if tag == b't' else PyList_New(size)
        items = PySequence_Fast_ITEMS(result)
        for i in range(size):
            item = _read(reader, depth + 1)
            Py_INCREF(item)
            items[i] = <PyObject*>item  # the new sequence's empty slot: nothing to release
        return result
    if tag == b'm':
        size = _take_count(reader)
        result = {}
        for i in range(size):
            key = _read(reader, depth + 1)
            item = _read(reader, depth + 1)
            PyDict_SetItem(result, key, item)  # an unhashable key raises TypeError
        return result
    if tag == b'd':
        memcpy(&real, _take(reader, 8), 8)
        return PyFloat_FromDouble(real)
    if tag == b'b':
        size = _take_u32(reader)
        at = _take(reader, size)
        return PyBytes_FromStringAndSize(at, size)
    raise ValueError(f"a control message holds an unknown tag {tag!r}")


def decode(bytes data, Py_ssize_t start, Py_ssize_t end):
    """The message ``encode`` wrote into ``data[start:end]``."""
    cdef _Reader reader
    cdef int i
    if start < 0 or end > PyBytes_GET_SIZE(data) or end - start < 1:
        raise ValueError("a control message outside its buffer")
    reader.data = PyBytes_AS_STRING(data) + start
    reader.size = end - start
    if <unsigned char>reader.data[0] != _FORMAT:
        raise ValueError("not a control message of this format")
    reader.position = 1
    reader.known_count = 0
    try:
        result = _read(&reader, 0)
    finally:
        for i in range(reader.known_count):
            Py_DECREF(<object>reader.known[i])
    if reader.position != reader.size:
        raise ValueError("a control message has bytes after its end")
    return result


cdef extern from "sys/ioctl.h":
    int ioctl(int fd, unsigned long request, ...) nogil
    enum: FIONREAD


cdef extern from "<sys/socket.h>" nogil:
    struct iovec:
        void* iov_base
        size_t iov_len
    struct msghdr:
        void* msg_name
        unsigned int msg_namelen
        iovec* msg_iov
        size_t msg_iovlen
        void* msg_control
        size_t msg_controllen
        int msg_flags
    struct cmsghdr:
        size_t cmsg_len
        int cmsg_level
        int cmsg_type
    ssize_t sendmsg(int fd, const msghdr* message, int flags)
    ssize_t recvmsg(int fd, msghdr* message, int flags)
    cmsghdr* CMSG_FIRSTHDR(msghdr* message)
    cmsghdr* CMSG_NXTHDR(msghdr* message, cmsghdr* header)
    unsigned char* CMSG_DATA(cmsghdr* header)
    size_t CMSG_SPACE(size_t length)
    size_t CMSG_LEN(size_t length)
    enum: SOL_SOCKET
    enum: SCM_RIGHTS
    enum: MSG_DONTWAIT
    enum: MSG_NOSIGNAL
    enum: MSG_CMSG_CLOEXEC


cdef extern from "<errno.h>" nogil:
    int errno
    enum: EINTR


cdef extern from "<string.h>" nogil:
    void* memset(void* target, int value, size_t count)


cdef extern from "Python.h":
    int PyErr_CheckSignals() except -1


# A frame: a u32 payload length and a u32 descriptor count (the machine's order: one host),
# then the payload; the descriptors travel with its first byte (SCM_RIGHTS).
FRAME_HEADER_BYTES = 8
cdef enum:
    _MAX_FDS = 8  # descriptors one frame or one read may carry
    _CONTROL_BYTES = 64  # >= CMSG_SPACE(_MAX_FDS * sizeof(int)) on every ABI
    _STACK_READ = 16384  # reads up to this size land on the stack first


cdef int _raise_unless_interrupted(int error) except -1:
    """A failed call's ``errno`` as the ``OSError`` subclass Python names it; none for
    ``EINTR`` (after the signal handlers ran), and the call is made again."""
    if error != EINTR:
        # (OSError's constructor picks the subclass: EAGAIN a BlockingIOError...)
        raise OSError(error, strerror(error).decode("utf-8", "replace"))
    PyErr_CheckSignals()
    return 0


def send_frame(int fd, bytes payload not None, fds):
    """Send ``payload`` as one frame, with ``fds`` (at most 8), in one ``sendmsg``: the
    bytes sent, header included (the caller sends the rest of a frame a full socket cut
    short). What ``socket.sendmsg`` does, without parsing its arguments, building the
    buffers' list or the ancillary data's tuple: each process-mode bundle and answer
    crosses here. Raises ``OSError`` (``EINTR`` retried)."""
    cdef uint32_t header[2]
    cdef iovec parts[2]
    cdef msghdr message
    cdef char control[_CONTROL_BYTES]
    cdef cmsghdr* control_header
    cdef int* carried
    cdef Py_ssize_t count = len(fds), i
    cdef Py_ssize_t length = PyBytes_GET_SIZE(payload)
    cdef ssize_t sent
    if count > _MAX_FDS:
        raise ValueError(f"a frame carries at most {_MAX_FDS} descriptors, not {count}")
    if length > _MAX_LENGTH:
        raise ValueError("a frame's payload is past 4 GiB")
    header[0] = <uint32_t>length
    header[1] = <uint32_t>count
    parts[0].iov_base = header
    parts[0].iov_len = 8
    parts[1].iov_base = <void*>PyBytes_AS_STRING(payload)
    parts[1].iov_len = <size_t>length
    memset(&message, 0, sizeof(message))
    message.msg_iov = parts
    message.msg_iovlen = 2
    if count:
        memset(control, 0, sizeof(control))
        message.msg_control = control
        message.msg_controllen = CMSG_SPACE(count * sizeof(int))
        control_header = CMSG_FIRSTHDR(&message)
        control_header.cmsg_level = SOL_SOCKET
        control_header.cmsg_type = SCM_RIGHTS
        control_header.cmsg_len = CMSG_LEN(count * sizeof(int))
        carried = <int*>CMSG_DATA(control_header)
        for i in range(count):
            carried[i] = fds[i]
    cdef int error
    while True:
        with nogil:
            sent = sendmsg(fd, &message, MSG_NOSIGNAL)
            error = errno
        if sent >= 0:
            return sent
        _raise_unless_interrupted(error)


def receive_chunk(int fd, Py_ssize_t size, bint dont_wait, fds_out):
    """Up to ``size`` bytes from the socket ``fd`` in one ``recvmsg`` (b"" at its end); the
    descriptors that came with them appended to ``fds_out`` (close-on-exec). ``dont_wait``:
    raise ``BlockingIOError`` rather than wait for bytes. What ``socket.recvmsg`` does
    without its argument parsing and the ancillary data's list of tuples. Raises ``OSError``
    (``EINTR`` retried)."""
    cdef char stack[_STACK_READ]
    cdef char* buffer = stack
    cdef iovec part
    cdef msghdr message
    cdef char control[_CONTROL_BYTES]
    cdef cmsghdr* control_header
    cdef int* carried
    cdef Py_ssize_t i, count
    cdef ssize_t received
    cdef int error
    cdef int flags = MSG_CMSG_CLOEXEC | (MSG_DONTWAIT if dont_wait else 0)
    if size <= 0:
        raise ValueError("a read of no bytes")
    if size > _STACK_READ:
        buffer = <char*>PyMem_Malloc(<size_t>size)
        if buffer == NULL:
            raise MemoryError()
    try:
        part.iov_base = buffer
        part.iov_len = <size_t>size
        while True:
            memset(&message, 0, sizeof(message))
            message.msg_iov = &part
            message.msg_iovlen = 1
            message.msg_control = control
            message.msg_controllen = sizeof(control)
            with nogil:
                received = recvmsg(fd, &message, flags)
                error = errno
            if received >= 0:
                break
            _raise_unless_interrupted(error)  # EAGAIN: BlockingIOError
        if message.msg_controllen:
            control_header = CMSG_FIRSTHDR(&message)
            while control_header != NULL:
                if (control_header.cmsg_level == SOL_SOCKET
                        and control_header.cmsg_type == SCM_RIGHTS):
                    count = (control_header.cmsg_len - CMSG_LEN(0)) // sizeof(int)
                    carried = <int*>CMSG_DATA(control_header)
                    for i in range(count):
                        fds_out.append(carried[i])
                control_header = CMSG_NXTHDR(&message, control_header)
        return PyBytes_FromStringAndSize(buffer, received)
    finally:
        if buffer != stack:
            PyMem_Free(buffer)


def waiting_bytes(int fd):
    """How many bytes a socket holds unread (0 where it cannot say): a reader that only
    looks whether a message has come learns it without a failed read and its exception."""
    cdef int count = 0
    if ioctl(fd, FIONREAD, &count) != 0:
        return 0
    return count
