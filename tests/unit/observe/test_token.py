"""GARM's metrics token: read without verifying, renewed at half its life or a new secret."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from observe.token import HeldToken, renewal_due, secret_fingerprint, token_expiry
from tests.garm_double import DEFAULT_JWT_TTL
from tests.tokens import jwt, token_expiring

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
SECRET = "J" * 40 + "wt-5ecret!"


def held(token: str, fetched_at: datetime = NOW, secret: str = SECRET) -> HeldToken:
    return HeldToken(token, fetched_at, secret_fingerprint(secret))


def test_token_expiry_is_read_without_verifying():
    assert token_expiry(token_expiring(NOW)) == NOW
    assert token_expiry("not-a-jwt") is None
    assert token_expiry("a.!!!.c") is None
    assert token_expiry(jwt({"read_metrics": True})) is None
    assert token_expiry(jwt({"exp": "soon"})) is None
    assert token_expiry(jwt({"exp": True})) is None


@pytest.mark.parametrize(
    ("now", "due"),
    [
        (NOW, False),
        (NOW + timedelta(days=182), False),
        (NOW + timedelta(hours=4380) - timedelta(seconds=1), False),
        (NOW + timedelta(hours=4380), True),  # half of 8760h
        (NOW + timedelta(hours=8760), True),
        (NOW + timedelta(days=400), True),
    ],
)
def test_renewal_at_half_the_lifetime(now, due):
    token = held(token_expiring(NOW + timedelta(hours=8760)))
    fingerprint = secret_fingerprint(SECRET)
    assert (renewal_due(token, now, fingerprint) is not None) is due


def test_renewal_when_the_jwt_secret_changed_or_nothing_is_held():
    token = held(token_expiring(NOW + timedelta(hours=8760)))
    other = secret_fingerprint(SECRET + "-rotated")
    assert renewal_due(token, NOW, other) == "GARM's JWT secret changed"
    assert renewal_due(None, NOW, other) == "no metrics token held"
    no_exp = held(jwt({"read_metrics": True}))
    assert renewal_due(no_exp, NOW, secret_fingerprint(SECRET))


def test_the_fingerprint_tells_secrets_apart_and_does_not_contain_them():
    first, second = (secret_fingerprint(s) for s in (SECRET, SECRET + "x"))
    assert first != second
    assert secret_fingerprint(SECRET) == first
    assert SECRET not in first and len(first) == 16


def test_held_token_survives_the_databag_and_hides_in_repr():
    token = held(token_expiring(NOW + DEFAULT_JWT_TTL))
    assert HeldToken.from_json(token.to_json()) == token
    assert token.token not in repr(token)
    for text in (None, "", "{", "[]", '{"token": 1}', json.dumps({"token": "t"})):
        assert HeldToken.from_json(text) is None
    naive = json.dumps(
        {"token": "t", "fetched-at": "2026-11-01T12:00:00", "jwt-secret-fingerprint": "f"}
    )
    assert HeldToken.from_json(naive) is None
