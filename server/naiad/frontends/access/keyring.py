"""Bearer keys (``--auth-key-file``, Naiad): who may call the server, and with which scopes.

The key file holds one key per line, ``<name> <token> <scope>[,<scope>...]`` (scopes ``infer``,
``read``, ``admin``; ``#`` starts a comment).  The name identifies a key in logs; tokens are never
logged, and only their SHA-256 digests are kept in memory.  A presented token is compared with every
key's digest in constant time, so timing tells an attacker neither how much of a token was right nor
which key it resembled.

The file is re-read when it changes (checked at most once a second, on use and by :meth:`Keyring.watch`),
so keys are added and revoked without a restart.  A file that no longer parses keeps the previous keys
(and is logged); a file that is gone revokes every key.  Watching matters for that rule: a process no
call reached while a good file was there (a frontend worker without connections) would otherwise keep
the keys from before it, revoked ones included, once the file broke.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from naiad.frontends.access.groups import Scope

log = logging.getLogger("naiad.access")

#: Tokens shorter than this are refused: a bearer token must not be guessable.
MIN_TOKEN_LENGTH = 16
_RECHECK_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Key:
    name: str
    digest: bytes
    scopes: frozenset[Scope]

    def allows(self, scope: Scope) -> bool:
        return Scope.ADMIN in self.scopes or scope in self.scopes


def parse_keys(text: str) -> list[Key]:
    """The keys of a key file's text; ``ValueError`` naming the line (never the token) otherwise."""
    keys: list[Key] = []
    names: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 3:
            raise ValueError(f"line {number}: expected <name> <token> <scopes>")
        name, token, scopes = fields
        if name in names:
            raise ValueError(f"line {number}: key '{name}' appears twice")
        if len(token) < MIN_TOKEN_LENGTH:
            raise ValueError(f"line {number}: the token of key '{name}' is shorter than {MIN_TOKEN_LENGTH}")
        try:
            granted = frozenset(Scope(scope) for scope in scopes.split(","))
        except ValueError:
            raise ValueError(
                f"line {number}: scopes of key '{name}' must be among infer, read, admin"
            ) from None
        names.add(name)
        keys.append(Key(name, _digest(token), granted))
    return keys


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Keyring:
    """The keys of one key file, reloaded when it changes."""

    def __init__(self, path: Path) -> None:
        """Read ``path`` now: a missing or malformed file at start-up is an error (``ValueError``)."""
        self.path = path
        self._stamp = self._stat()
        if self._stamp is None:
            raise ValueError(f"cannot read the key file {path}")
        self._keys = parse_keys(path.read_text(encoding="utf-8"))
        self._checked = time.monotonic_ns()

    def match(self, token: str) -> Key | None:
        """The key whose token is ``token``, compared with every key in constant time."""
        self._refresh()
        digest = _digest(token)
        found: Key | None = None
        for key in self._keys:
            if hmac.compare_digest(key.digest, digest):
                found = key
        return found

    async def watch(self) -> None:
        """Look at the file once a second until cancelled, so that every good version is taken."""
        while True:
            await asyncio.sleep(_RECHECK_NS / 1e9)
            self._reload()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return info.st_mtime_ns, info.st_size, info.st_ino

    def _refresh(self) -> None:
        now = time.monotonic_ns()
        if now - self._checked >= _RECHECK_NS:
            self._reload()

    def _reload(self) -> None:
        """Take the file's keys if it changed since last looked at."""
        self._checked = time.monotonic_ns()
        stamp = self._stat()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        if stamp is None:
            log.warning("key file %s is gone: every key is revoked", self.path)
            self._keys = []
            return
        try:
            keys = parse_keys(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            log.error("key file %s not reloaded, the previous keys stay: %s", self.path, exc)
            return
        self._keys = keys
        log.info("key file %s reloaded: %d keys (%s)", self.path, len(keys), ", ".join(k.name for k in keys))
