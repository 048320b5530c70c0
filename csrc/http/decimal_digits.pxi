# Included by the HTTP framing and the infer header writer (one copy, compiled into each).


cdef inline int _decimal_digits(long long value, char* digits) noexcept nogil:
    """A non-negative integer's decimal digits, written to the end of ``digits`` (24
    bytes): the index of the first (not snprintf: a thousand instructions a call)."""
    cdef int first = 24
    while True:
        first -= 1
        digits[first] = c'0' + <char>(value % 10)
        value //= 10
        if value == 0:
            return first
