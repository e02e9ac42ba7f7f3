"""Whether a port is free to listen on, checked before listeners that share it are made.

The gRPC frontend's servers, and frontend workers' listeners, bind their ports with ``SO_REUSEPORT``,
which would let them share a port with anything else that set it too, and make a worker that finds its
port taken fail only after it was started (and start again, and fail again).  Binding the port once
without ``SO_REUSEPORT`` fails whatever else listens there, whatever its flags: so the server says
"address already in use" and exits, as Triton does, before making listeners that would share it.  (A
process binding the port in the moment between this check and the listeners' binds would share it.)
"""

from __future__ import annotations

import errno
import socket


def check_free(host: str, port: int) -> None:
    """Raise ``RuntimeError("address already in use")`` when something listens on ``host:port``
    (``RuntimeError`` too for a host that does not resolve or is not this machine's); port 0 is free."""
    if port == 0:
        return
    host = host.removeprefix("[").removesuffix("]")
    try:
        found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as error:  # (a name that does not resolve: no listener could bind it either)
        raise RuntimeError(str(error)) from error
    for family, kind, protocol, _, where in found:
        try:
            probe = socket.socket(family, kind, protocol)
        except OSError:  # (a family this host lacks, e.g. IPv6 turned off: the listeners skip it too)
            continue
        with probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (TIME_WAIT is no listener)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            try:
                probe.bind(where)
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    raise RuntimeError("address already in use") from error
                raise RuntimeError(str(error)) from error
