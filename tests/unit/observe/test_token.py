"""GARM's metrics token: read without verifying, renewed at half its life or a new secret,
withdrawn once expired, and never in its own record."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

import pytest

from garm.client import GarmUnreachable
from observe.token import (
    HeldToken,
    LeaderGarm,
    renewal_due,
    renewed,
    secret_fingerprint,
    token_expiry,
)
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
        (NOW + timedelta(hours=11), False),
        (NOW + timedelta(hours=12) - timedelta(seconds=1), False),
        (NOW + timedelta(hours=12), True),  # half of GARM's 24h, as the charm sets it
        (NOW + timedelta(hours=24), True),
        (NOW + timedelta(days=400), True),
    ],
)
def test_renewal_at_half_the_lifetime(now, due):
    token = held(token_expiring(NOW + timedelta(hours=24)))
    fingerprint = secret_fingerprint(SECRET)
    assert (renewal_due(token, now, fingerprint) is not None) is due


def test_renewal_when_the_jwt_secret_changed_or_nothing_is_held():
    token = held(token_expiring(NOW + timedelta(hours=24)))
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


def test_the_record_says_when_and_under_which_secret_and_never_the_token():
    token = held(token_expiring(NOW + DEFAULT_JWT_TTL))
    record = token.record()
    assert json.loads(record) == {
        "fetched-at": NOW.isoformat(),
        "jwt-secret-fingerprint": secret_fingerprint(SECRET),
    }
    assert token.token not in record and token.token not in repr(token)
    assert HeldToken.from_record(token.token, record) == token


@pytest.mark.parametrize(
    ("published", "text"),
    [
        (None, "record"),
        ("", "record"),
        ("token", None),
        ("token", ""),
        ("token", "{"),
        ("token", "[]"),
        ("token", json.dumps({"fetched-at": NOW.isoformat()})),
        ("token", json.dumps({"fetched-at": 1, "jwt-secret-fingerprint": "f"})),
        ("token", json.dumps({"fetched-at": NOW.isoformat(), "jwt-secret-fingerprint": 7})),
        (
            "token",
            json.dumps({"fetched-at": "2026-11-01T12:00:00", "jwt-secret-fingerprint": "f"}),
        ),
    ],
)
def test_a_record_or_token_that_does_not_read_holds_nothing(published, text):
    if text == "record":
        text = held("t").record()
    assert HeldToken.from_record(published, text) is None


def test_a_record_that_still_carries_a_copy_of_the_token_reads_without_it():
    """Before the token was kept once only, the record held a copy of it too."""
    legacy = json.dumps(
        {"token": "the-copy", "fetched-at": NOW.isoformat(), "jwt-secret-fingerprint": "f"}
    )
    kept = HeldToken.from_record("the-published-one", legacy)
    assert kept == HeldToken("the-published-one", NOW, "f")
    assert kept is not None and "the-copy" not in kept.record()


def _unreachable() -> str:
    raise GarmUnreachable("GET /metrics-token: ConnectionError")


def _broken() -> str:
    raise RuntimeError("Bearer the-token-it-sent")


@pytest.mark.parametrize(
    "leader",
    [
        LeaderGarm(9997, SECRET, None),  # GARM did not answer this pass
        LeaderGarm(9997, None, lambda: "never asked"),  # the JWT secret does not read
        LeaderGarm(9997, SECRET, _unreachable),
        LeaderGarm(9997, SECRET, _broken),
    ],
)
def test_a_token_not_renewed_is_kept_until_it_expires_then_withdrawn(leader, caplog):
    caplog.set_level(logging.DEBUG)
    token = held(token_expiring(NOW + timedelta(hours=24)))
    assert renewed(token, NOW + timedelta(hours=24) - timedelta(seconds=1), leader) == token
    assert renewed(token, NOW + timedelta(hours=24), leader) is None
    assert "expired before it was renewed: it is withdrawn" in caplog.text
    assert token.token not in caplog.text and "the-token-it-sent" not in caplog.text


def test_a_token_without_an_expiry_is_not_withdrawn():
    """GARM's tokens all say ``exp``; one that does not cannot be told to have expired."""
    token = held(jwt({"read_metrics": True}))
    assert renewed(token, NOW + timedelta(days=800), LeaderGarm(9997, SECRET, None)) == token


def test_a_renewed_token_replaces_an_expired_one():
    token = held(token_expiring(NOW))
    new = renewed(token, NOW, LeaderGarm(9997, SECRET, lambda: "new"))
    assert new == HeldToken("new", NOW, secret_fingerprint(SECRET))
