"""The IAM policy language as S3 reads it: parse and validate a document, match a request.

Bucket policies (resource-based: Principal required) and user policies (identity-based: no
Principal) share this module. `parse_policy` raises `PolicyError` with the reason S3 gives in
its MalformedPolicy answer; a parsed `Policy` is immutable and cached by the authorizer, so a
request costs only the matching below: wildcard patterns compiled once per pattern.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from server.access.actions import ARN_PREFIX, KNOWN_ACTIONS, OBJECT_ACTIONS, SERVICE_ACTIONS
from server.access.conditions import Block, ConditionError, Context, holds, parse_block, wildcard

VERSIONS = ("2012-10-17", "2008-10-17")
MAX_BUCKET_POLICY_BYTES = 20 * 1024
MAX_USER_POLICY_BYTES = 10 * 1024
_STATEMENT_FIELDS = {
    "Sid",
    "Effect",
    "Principal",
    "NotPrincipal",
    "Action",
    "NotAction",
    "Resource",
    "NotResource",
    "Condition",
}
_ACCOUNT_RE = re.compile(r"^\d{12}$")
_IAM_ARN_RE = re.compile(r"^arn:aws:iam::(\d{12}|\*)?:(root|user/[\w+=,.@/*?-]+)$")
_VARIABLE_RE = re.compile(r"\$\{([^}]*)\}")


class PolicyError(ValueError):
    """A document S3 refuses with MalformedPolicy; the message is S3's reason."""


@dataclass(frozen=True)
class Caller:
    """Who asks, as a policy sees it."""

    anonymous: bool
    name: str = ""  # the user's name (aws:username)
    access_key: str = ""  # aws:userid
    account: str = ""  # this server's account id

    @property
    def arn(self) -> str:
        return f"arn:aws:iam::{self.account}:user/{self.name}"


def _substitute(text: str, caller: Caller | None) -> str:
    """${aws:username}, ${aws:userid}, ${*} ${?} ${$} in a Resource or a string condition value."""
    if "${" not in text:
        return text

    def one(match: re.Match[str]) -> str:
        name = match.group(1).lower()
        if name in ("*", "?", "$"):
            return "\x00" + name if name != "$" else "$"
        if caller is None or caller.anonymous:
            return match.group(0)
        if name == "aws:username":
            return caller.name
        if name == "aws:userid":
            return caller.access_key
        return match.group(0)

    return _VARIABLE_RE.sub(one, text)


def _pattern_matches(
    pattern: str, value: str, caller: Caller | None = None, *, ignore_case: bool = False
) -> bool:
    pattern = _substitute(pattern, caller)
    if "\x00" in pattern:  # a literal * or ? from ${*} / ${?}
        pieces = re.split(r"(\x00[*?])", pattern)
        regex = "".join(
            re.escape(p[1]) if p.startswith("\x00") else wildcard(p, ignore_case).pattern for p in pieces if p
        )
        return re.fullmatch(regex, value, re.DOTALL | (re.IGNORECASE if ignore_case else 0)) is not None
    return wildcard(pattern, ignore_case).fullmatch(value) is not None


class Patterns:
    """A list of IAM patterns (`*`, `?`) compiled once: exact names in a set, the rest in one regex.

    Matching is the hot path of every decision (a statement's actions and resources), so it is
    one set lookup and at most one regex match; patterns holding policy variables (${aws:username})
    are substituted per caller instead."""

    __slots__ = ("everything", "exact", "regex", "variable", "ignore_case", "memo")

    def __init__(self, patterns: tuple[str, ...], *, ignore_case: bool = False) -> None:
        self.ignore_case = ignore_case
        self.everything = "*" in patterns
        fold = str.lower if ignore_case else str
        self.exact = frozenset(fold(p) for p in patterns if "*" not in p and "?" not in p and "${" not in p)
        wild = [p for p in patterns if ("*" in p or "?" in p) and "${" not in p]
        self.regex = (
            re.compile(
                "|".join(f"(?:{wildcard(p).pattern})" for p in wild),
                re.DOTALL | (re.IGNORECASE if ignore_case else 0),
            )
            if wild
            else None
        )
        self.variable = tuple(p for p in patterns if "${" in p)
        # Actions are few (s3:GetObject, ...): their answers are remembered. Resources are not.
        self.memo: dict[str, bool] | None = {} if ignore_case and not self.variable else None

    def matches_memo(self, value: str) -> bool:
        memo = self.memo
        if memo is None:
            return self.matches(value)
        known = memo.get(value)
        if known is None:
            if len(memo) > 512:
                memo.clear()
            known = memo[value] = self.matches(value)
        return known

    def matches(self, value: str, caller: Caller | None = None) -> bool:
        if self.everything:
            return True
        if (value.lower() if self.ignore_case else value) in self.exact:
            return True
        if self.regex is not None and self.regex.fullmatch(value) is not None:
            return True
        return any(_pattern_matches(p, value, caller, ignore_case=self.ignore_case) for p in self.variable)


@dataclass(frozen=True)
class Principals:
    """A Principal / NotPrincipal element: everyone, or the named users / accounts / keys."""

    everyone: bool = False
    aws: tuple[str, ...] = ()
    canonical: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Split once what matching needs: keys and accounts, whole accounts (":root"), user names.
        names: set[str] = set()
        accounts: set[str] = set()
        users: list[tuple[str, str]] = []
        for value in self.aws:
            match = _IAM_ARN_RE.match(value)
            if match is None:
                names.add(value)
                continue
            account, who = match.group(1) or "", match.group(2)
            if who == "root":
                accounts.add(account)
            else:
                users.append((account, who[len("user/") :]))
        object.__setattr__(self, "_names", frozenset(names))
        object.__setattr__(self, "_accounts", frozenset(accounts))
        object.__setattr__(self, "_users", tuple(users))

    def matches(self, caller: Caller, owner_ids: tuple[str, ...] = ()) -> bool:
        if self.everyone:
            return True
        if caller.anonymous:
            return False
        names: frozenset[str] = self._names  # type: ignore[attr-defined]
        if "*" in names or caller.access_key in names or caller.account in names:
            return True
        accounts: frozenset[str] = self._accounts  # type: ignore[attr-defined]
        if accounts and ("" in accounts or "*" in accounts or caller.account in accounts):
            return True
        for account, user in self._users:  # type: ignore[attr-defined]
            if account in ("", "*", caller.account) and (
                user == caller.name or (("*" in user or "?" in user) and _pattern_matches(user, caller.name))
            ):
                return True
        return any(c in owner_ids for c in self.canonical)


@dataclass(frozen=True)
class Statement:
    sid: str
    allow: bool
    principal: Principals | None
    not_principal: Principals | None
    actions: tuple[str, ...]
    not_actions: tuple[str, ...]
    resources: tuple[str, ...]
    not_resources: tuple[str, ...]
    condition: Block = field(default_factory=list)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_actions", Patterns(self.actions or self.not_actions, ignore_case=True))
        object.__setattr__(self, "_resources", Patterns(self.resources or self.not_resources))

    @property
    def label(self) -> str:
        return self.sid

    def applies_to_caller(self, caller: Caller, owner_ids: tuple[str, ...] = ()) -> bool:
        if self.principal is not None:
            return self.principal.matches(caller, owner_ids)
        if self.not_principal is not None:
            return not self.not_principal.matches(caller, owner_ids)
        return True  # a user policy: it is attached to the caller

    def applies_to_action(self, action: str) -> bool:
        matched = self._actions.matches_memo(action)  # type: ignore[attr-defined]
        return matched if self.actions else not matched

    def applies_to(self, action: str, resource: str, caller: Caller) -> bool:
        if not self.applies_to_action(action):
            return False
        matched = self._resources.matches(resource, caller)  # type: ignore[attr-defined]
        return matched if self.resources else not matched

    def conditions_hold(self, context: Context, caller: Caller) -> bool:
        if not self.condition:
            return True
        return holds(self.condition, context, lambda text: _substitute(text, caller))

    @property
    def is_public(self) -> bool:
        """S3's "public": Principal * (or NotPrincipal) with no condition that pins the caller down."""
        public_principal = (
            self.principal is not None and (self.principal.everyone or "*" in self.principal.aws)
        ) or self.not_principal is not None
        return self.allow and public_principal and not _restricting(self.condition)


# Conditions whose fixed values limit who may call (S3's list for "is this policy public").
_RESTRICTING_KEYS = {
    "aws:sourceip",
    "aws:sourcevpc",
    "aws:sourcevpce",
    "aws:sourcearn",
    "aws:sourceaccount",
    "aws:sourceowner",
    "aws:principalaccount",
    "aws:principalarn",
    "aws:principalorgid",
    "aws:userid",
    "aws:username",
    "s3:dataaccesspointarn",
    "s3:dataaccesspointaccount",
}


def _restricting(block: Block) -> bool:
    for _qualifier, base, _if_exists, key, values in block:
        if key.lower() not in _RESTRICTING_KEYS:
            continue
        if base in ("StringEquals", "StringEqualsIgnoreCase", "ArnEquals"):
            return True
        if base in ("StringLike", "ArnLike") and not any("*" in v or "?" in v for v in values):
            return True
        if base == "IpAddress" and not any(v.strip().endswith("/0") for v in values):
            return True
    return False


@dataclass(frozen=True)
class Policy:
    version: str
    statements: tuple[Statement, ...]
    text: str  # as the client sent it: GetBucketPolicy answers it byte for byte

    @property
    def is_public(self) -> bool:
        return any(s.is_public for s in self.statements)

    @property
    def reads_object_tags(self) -> bool:
        return any(
            key.lower().startswith("s3:existingobjecttag/")
            for s in self.statements
            for _q, _b, _e, key, _v in s.condition
        )


def _strings(value: Any, name: str) -> tuple[str, ...]:
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) and v for v in values):
        raise PolicyError(
            f"Policy has invalid {name.lower()}"
            if name in ("Action", "Resource")
            else f"Invalid {name} in policy"
        )
    return tuple(values)


def _principals(value: Any, check_key: Callable[[str], bool]) -> Principals:
    if value == "*":
        return Principals(everyone=True)
    if not isinstance(value, dict) or not value:
        raise PolicyError("Invalid principal in policy")
    aws: tuple[str, ...] = ()
    canonical: tuple[str, ...] = ()
    for kind, names in value.items():
        listed = names if isinstance(names, list) else [names]
        if not listed or not all(isinstance(n, str) and n for n in listed):
            raise PolicyError("Invalid principal in policy")
        if kind == "AWS":
            for name in listed:
                if not (name == "*" or _ACCOUNT_RE.match(name) or _IAM_ARN_RE.match(name) or check_key(name)):
                    raise PolicyError("Invalid principal in policy")
            aws += tuple(listed)
        elif kind == "CanonicalUser":
            canonical += tuple(listed)
        elif kind in ("Service", "Federated"):
            continue  # no such callers here: the statement simply never matches them
        else:
            raise PolicyError("Invalid principal in policy")
    return Principals(aws=aws, canonical=canonical)


def _check_action(action: str) -> None:
    if action == "*":
        return
    service, sep, name = action.partition(":")
    if not sep or service.lower() != "s3" or not name:
        raise PolicyError("Policy has invalid action")
    if "*" in name or "?" in name:
        return
    if not any(known.lower() == action.lower() for known in KNOWN_ACTIONS):
        raise PolicyError("Policy has invalid action")


def _check_resource(resource: str, bucket: str | None) -> None:
    if resource == "*":
        return
    if not resource.startswith(ARN_PREFIX) or len(resource) == len(ARN_PREFIX):
        raise PolicyError("Policy has invalid resource")
    if bucket is not None:
        # A bucket policy governs its own bucket only.
        target = resource[len(ARN_PREFIX) :].split("/", 1)[0]
        if not wildcard(target).fullmatch(bucket):
            raise PolicyError("Policy has invalid resource")


def _kind_of(action: str) -> set[str]:
    """Which resource kinds an action (maybe a wildcard) can act on: "object", "bucket", "service"."""
    if action == "*" or "*" in action or "?" in action:
        return {"object", "bucket", "service"}
    canonical = next((k for k in KNOWN_ACTIONS if k.lower() == action.lower()), action)
    if canonical in OBJECT_ACTIONS:
        return {"object"}
    if canonical in SERVICE_ACTIONS:
        return {"service", "bucket"}
    return {"bucket"}


def _resource_kind(resource: str) -> set[str]:
    if resource == "*":
        return {"object", "bucket", "service"}
    rest = resource[len(ARN_PREFIX) :]
    if "/" in rest:
        return {"object"}
    if "*" in rest or "?" in rest:
        return {"object", "bucket"}
    return {"bucket"}


def parse_policy(
    text: str | bytes,
    *,
    bucket: str | None = None,
    user_policy: bool = False,
    check_key: Callable[[str], bool] = lambda _key: False,
) -> Policy:
    """Parse and validate a policy document; PolicyError (S3's reason) if it is malformed.

    `bucket`: a bucket policy's bucket (its resources must lie in it; Principal required).
    `user_policy`: an identity policy (no Principal allowed). `check_key`: is this an access key
    of ours (a Principal may name one)."""
    raw_text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    limit = MAX_USER_POLICY_BYTES if user_policy else MAX_BUCKET_POLICY_BYTES
    if len(raw_text.encode()) > limit:
        raise PolicyError("Policy exceeds the maximum allowed document size.")
    if not raw_text.lstrip().startswith("{"):
        raise PolicyError("Policies must be valid JSON and the first byte must be '{'")
    try:
        document = json.loads(raw_text)
    except ValueError:
        raise PolicyError("Policies must be valid JSON and the first byte must be '{'") from None
    if not isinstance(document, dict):
        raise PolicyError("Policies must be valid JSON and the first byte must be '{'")
    for name in document:
        if name not in ("Version", "Id", "Statement"):
            raise PolicyError(f"Unknown field {name}")
    version = document.get("Version", "2008-10-17")
    if version not in VERSIONS:
        raise PolicyError("The policy must contain a valid version string")
    if "Statement" not in document:
        raise PolicyError("Missing required field Statement")
    raw_statements = document["Statement"]
    if isinstance(raw_statements, dict):
        raw_statements = [raw_statements]
    if not isinstance(raw_statements, list) or not raw_statements:
        raise PolicyError("Missing required field Statement")
    statements: list[Statement] = []
    sids: set[str] = set()
    for index, raw in enumerate(raw_statements):
        statement = _statement(raw, index, bucket, user_policy, check_key)
        if statement.sid in sids and not statement.sid.startswith("#"):
            raise PolicyError("Statement IDs (SID) must be unique")
        sids.add(statement.sid)
        statements.append(statement)
    return Policy(version, tuple(statements), raw_text)


def _statement(
    raw: Any, index: int, bucket: str | None, user_policy: bool, check_key: Callable[[str], bool]
) -> Statement:
    if not isinstance(raw, dict):
        raise PolicyError("Statement is not an object")
    for name in raw:
        if name not in _STATEMENT_FIELDS:
            raise PolicyError(f"Unknown field {name}")
    sid = raw.get("Sid", "")
    if not isinstance(sid, str) or (sid and not re.fullmatch(r"[\w .:,=@+-]*", sid)):
        raise PolicyError("Statement IDs (SID) must be alpha-numeric")
    if "Effect" not in raw:
        raise PolicyError("Missing required field Effect")
    effect = raw["Effect"]
    if effect not in ("Allow", "Deny"):
        raise PolicyError(f"Invalid effect: {effect}")
    principal = not_principal = None
    has_principal = "Principal" in raw or "NotPrincipal" in raw
    if user_policy and has_principal:
        raise PolicyError("Policy document should not specify a principal.")
    if not user_policy:
        if not has_principal:
            raise PolicyError("Missing required field Principal")
        if "Principal" in raw and "NotPrincipal" in raw:
            raise PolicyError("Invalid principal in policy")
        if "Principal" in raw:
            principal = _principals(raw["Principal"], check_key)
        else:
            not_principal = _principals(raw["NotPrincipal"], check_key)
    if ("Action" in raw) == ("NotAction" in raw):
        raise PolicyError("Missing required field Action")
    actions = _strings(raw["Action"], "Action") if "Action" in raw else ()
    not_actions = _strings(raw["NotAction"], "Action") if "NotAction" in raw else ()
    for action in actions + not_actions:
        _check_action(action)
    if ("Resource" in raw) == ("NotResource" in raw):
        raise PolicyError("Missing required field Resource")
    resources = _strings(raw["Resource"], "Resource") if "Resource" in raw else ()
    not_resources = _strings(raw["NotResource"], "Resource") if "NotResource" in raw else ()
    for resource in resources + not_resources:
        _check_resource(resource, bucket)
    if actions and resources:
        kinds: set[str] = set()
        for resource in resources:
            kinds |= _resource_kind(resource)
        if not all(_kind_of(a) & kinds for a in actions):
            raise PolicyError("Action does not apply to any resource(s) in statement")
    try:
        condition = parse_block(raw["Condition"]) if "Condition" in raw else []
    except ConditionError as exc:
        raise PolicyError(str(exc)) from None
    return Statement(
        sid=sid or f"#{index}",
        allow=effect == "Allow",
        principal=principal,
        not_principal=not_principal,
        actions=actions,
        not_actions=not_actions,
        resources=resources,
        not_resources=not_resources,
        condition=condition,
    )
