"""Free TCP ports on 127.0.0.1 for the loopback clusters (no TensorFlow import: the drivers
that start clusters of processes stay light)."""

from __future__ import annotations

import socket


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports the kernel had free a moment ago (all bound at once, so distinct)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
