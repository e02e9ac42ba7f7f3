"""TLS material for both frontends, read once at start-up so a bad path fails the start, not a call.

The HTTP frontend mirrors the gRPC flags (``--grpc-use-ssl``, ``--grpc-server-cert``,
``--grpc-server-key``, ``--grpc-root-cert``, ``--grpc-use-ssl-mutual``) as ``--http-use-ssl`` and
friends: a server certificate and key, and for mutual TLS a root certificate that client certificates
must chain to.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: Path
    key: Path
    root: Path | None
    mutual: bool


def tls_files(
    use_ssl: bool, mutual: bool, cert: Path | None, key: Path | None, root: Path | None, flag: str
) -> TlsFiles | None:
    """The TLS files a frontend's flags name (``None``: plain text); ``ValueError`` when incomplete.

    ``flag`` is the flags' prefix (``--http``, ``--grpc``) for the messages.
    """
    if not (use_ssl or mutual):
        return None
    if cert is None or key is None:
        raise ValueError(f"{flag}-use-ssl needs {flag}-server-cert and {flag}-server-key")
    if mutual and root is None:
        raise ValueError(f"{flag}-use-ssl-mutual needs {flag}-root-cert (to verify client certificates)")
    for path in (cert, key, root):
        if path is not None and not path.is_file():
            raise ValueError(f"{flag}: cannot read {path}")
    return TlsFiles(cert, key, root, mutual)
