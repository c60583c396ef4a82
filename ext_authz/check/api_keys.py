"""API keys in the HTTP check: a consumer's key in ``x-api-key`` becomes its identity.

A key is ``ghk_<id>_<secret>``: ``<id>`` (8 hex digits) is a non-secret name the operator
recognises in ``gatehouse apikey list``; ``<secret>`` is 32 random bytes
(``secrets.token_urlsafe``). Only the sha256 of the whole key is stored (Redis, or a
Kubernetes Secret in the chart) and mirrored in memory (``RevocationSet.api_keys``, fed by
the revocation mirror's channel and resync). A check hashes what the client sent and looks
the digest up in a dict: no comparison of a secret with anything exists, so no timing can
leak a prefix of a key. A plain sha256 (no pepper) is enough: a key has 256 bits of
entropy, so its digest cannot be brute-forced, and a pepper would be one more secret to
share between the CLI, the chart and every instance.

On a route with ``auth.apiKeys`` (``AuthRequirements.api_keys``):

- a request with ``x-api-key`` is judged by the key alone (the key wins over a token: one
  credential decides, and a bad key is never retried as a token);
- without one, a token as usual, unless the route takes keys only;
- with neither: 401, ``WWW-Authenticate`` naming both schemes (``Bearer`` and ``ApiKey``).

An accepted key sends ``x-user-id`` and ``x-consumer`` (the consumer) upstream, and
``x-principal`` ``apikey;<consumer>``, which ``user`` limits count by: per consumer, and
never together with a token's user of the same name; ``consumers.allow``/``deny`` decide with 403. The key is never
logged or answered: denials name a reason code.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ext_authz.errors import ApiKeyError, AuthzError, ConsumerForbidden
from ext_authz.responses import denial_parts
from ext_authz.revocation.mirror import RevocationMirror
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from servicekit.check_contract import API_KEY_HEADER as API_KEY_HEADER
from servicekit.check_contract import CONSUMER_HEADER as CONSUMER_HEADER
from servicekit.check_contract import PRINCIPAL_HEADER
from servicekit.check_contract import USER_ID_HEADER as USER_ID_HEADER
from ext_authz.tokens.principal import key_principal

KEY_PREFIX: Final = "ghk_"
MAX_KEY_BYTES: Final = 256
"""A longer header is no key of ours: refused before it is hashed."""
KEY_CHALLENGE: Final = f'ApiKey realm="gatehouse", header="{API_KEY_HEADER}"'


def new_key() -> tuple[str, str]:
    """(key id, key): a fresh key, shown once; only ``key_hash(key)`` is kept."""
    key_id = secrets.token_hex(4)
    return key_id, f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"


def key_hash(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


@dataclass(frozen=True, slots=True)
class KeyRule:
    """A route's API-key rule, from its ``AuthRequirements``."""

    only: bool
    """No token is read: a key is the only way in."""
    allow: frozenset[str]
    """Consumers let in; empty: any."""
    deny: frozenset[str]

    def challenge(self, bearer: str | None) -> str:
        """``WWW-Authenticate``: the schemes this route takes."""
        return KEY_CHALLENGE if self.only or bearer is None else f"{bearer}, {KEY_CHALLENGE}"


def key_rule(auth: policy_pb2.AuthRequirements) -> KeyRule | None:
    if not auth.api_keys:
        return None
    return KeyRule(auth.api_keys_only, frozenset(auth.allow_consumers), frozenset(auth.deny_consumers))


def denial_for(rule: KeyRule, error: AuthzError, request_id: str) -> tuple[int, list[tuple[str, str]], bytes]:
    """The denial as ``denial_parts`` writes it, its challenge naming the schemes the route takes."""
    status, headers, body = denial_parts(error, request_id)
    if status != 401:
        return status, headers, body
    bearer = next((v for k, v in headers if k == "www-authenticate"), None)
    others = [(k, v) for k, v in headers if k != "www-authenticate"]
    return status, [*others, ("www-authenticate", rule.challenge(None if isinstance(error, ApiKeyError) else bearer))], body


@dataclass(frozen=True, slots=True)
class KeyCaller:
    """What the check needs of an accepted key where it would use a verified token: the
    identity lines are cached by ``(token_hash, issuer)``, and the audit names ``subject``."""

    token_hash: bytes
    subject: str
    issuer: str = "api-key"
    jti: None = None


class ApiKeyCheck:
    """The key half of the HTTP check, on the revocation mirror's keys."""

    def __init__(self, mirror: RevocationMirror) -> None:
        self._mirror = mirror
        self._identities: dict[str, dict[str, str]] = {}

    @staticmethod
    def applies(rule: KeyRule, headers: Mapping[str, str]) -> bool:
        """The key decides: one was sent, or the route takes nothing else."""
        return rule.only or API_KEY_HEADER in headers

    def decide(self, rule: KeyRule, headers: Mapping[str, str], now: float) -> tuple[dict[str, str], KeyCaller]:
        """(identity headers, caller), or ApiKeyError (401), ConsumerForbidden (403),
        UnavailableError (503). The identity is ``x-user-id`` and ``x-consumer`` (the consumer)
        and ``x-principal`` (``apikey;<consumer>``: never a token user's)."""
        presented = headers.get(API_KEY_HEADER)
        if not presented:
            raise ApiKeyError("missing_key", "an API key is required (x-api-key)")
        if len(presented) > MAX_KEY_BYTES or not presented.startswith(KEY_PREFIX):
            raise ApiKeyError("malformed_key", "the API key is not one this gateway issues")
        digest = key_hash(presented)
        key = self._mirror.api_key(digest, now)
        if key is None:
            raise ApiKeyError("unknown_key", "the API key is not valid")
        consumer = key.consumer
        if consumer in rule.deny or (rule.allow and consumer not in rule.allow):
            error = ConsumerForbidden("consumer", "this consumer may not use this route")
            error.subject = consumer
            raise error
        identity = self._identities.get(consumer)
        if identity is None:
            if len(self._identities) >= 10_000:
                self._identities.clear()
            identity = self._identities[consumer] = {
                USER_ID_HEADER: consumer, CONSUMER_HEADER: consumer, PRINCIPAL_HEADER: key_principal(consumer)
            }
        return identity, KeyCaller(digest, consumer)


KEYS_WITHOUT_STORE = "takes API keys, and ext_authz has no revocation: (the key store)"
"""Why a key route is refused by an ext_authz without a key store (the route alone)."""
