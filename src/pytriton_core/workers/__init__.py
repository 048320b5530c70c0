"""``--workers N``: several server processes behind the same ports, one server to clients.

``supervisor`` is the parent; ``board`` the memory the parent and its workers share;
``shared_stats`` the statistics a worker writes there and reads summed back; ``seat`` what
a worker's server is given to take its part.
"""
