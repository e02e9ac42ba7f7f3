"""Key files: what a valid one looks like, and errors that name the line but never the token."""

from __future__ import annotations

import pytest
from naiad.frontends.access.groups import Scope
from naiad.frontends.access.keyring import parse_keys

TOKEN = "a-secret-token-0123456789"


def test_keys_and_their_scopes() -> None:
    keys = parse_keys(f"# comment\n\nops {TOKEN} admin  # trailing comment\nbot {TOKEN}x infer,read\n")
    assert [(k.name, k.scopes) for k in keys] == [
        ("ops", frozenset({Scope.ADMIN})),
        ("bot", frozenset({Scope.INFER, Scope.READ})),
    ]
    assert keys[0].allows(Scope.INFER) and keys[0].allows(Scope.READ)
    assert keys[1].allows(Scope.READ) and not keys[1].allows(Scope.ADMIN)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (f"ops {TOKEN}\n", "line 1: expected <name> <token> <scopes>"),
        (f"a {TOKEN} read\na {TOKEN}b read\n", "line 2: key 'a' appears twice"),
        ("ops short admin\n", "line 1: the token of key 'ops' is shorter than 16"),
        (f"ops {TOKEN} root\n", "line 1: scopes of key 'ops' must be among infer, read, admin"),
    ],
)
def test_errors_name_the_line_not_the_token(text: str, error: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_keys(text)
    assert str(caught.value) == error
    assert TOKEN not in str(caught.value)
