"""Front ends: the wire protocols (HTTP/REST, gRPC) in front of the one core."""
