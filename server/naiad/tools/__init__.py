"""Tools that drive a server from outside, as a user's client does: ``naiad perf`` and ``naiad analyze``.

They speak only the KServe v2 protocol (HTTP or gRPC), so they measure real Triton exactly as they measure
Naiad, and they import nothing of the server's request path (an import-linter contract keeps it so).
"""
