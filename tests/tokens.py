"""JWTs shaped as GARM issues them, unsigned: for what reads a token without verifying it."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any


def jwt(claims: dict[str, Any]) -> str:
    def seg(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{seg({'alg': 'HS256', 'typ': 'JWT'})}.{seg(claims)}.c2lnbmF0dXJl"


def token_expiring(at: datetime) -> str:
    return jwt({"read_metrics": True, "iss": "garm", "exp": int(at.timestamp())})
