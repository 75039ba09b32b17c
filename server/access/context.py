"""The request facts a policy Condition may ask about (aws:SourceIp, s3:prefix, ...).

Computed on demand: most requests meet no condition at all, so nothing is built up front.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from server.credentials import Identity
from tiering.records import ObjectRecord

LIST_ACTIONS = frozenset({"s3:ListBucket", "s3:ListBucketVersions", "s3:ListBucketMultipartUploads"})


class RequestContext:
    def __init__(
        self,
        identity: Identity,
        action: str | None,
        *,
        request: Any = None,  # starlette Request (client address, scheme, headers)
        query: dict[str, str] | None = None,
        auth_scheme: str | None = None,
        record: ObjectRecord | None = None,
    ) -> None:
        self.identity = identity
        self.action = action
        self.request = request
        self.query = query or {}
        self.auth_scheme = auth_scheme
        self.record = record
        self._headers = request.headers if request is not None else {}

    def get(self, key: str) -> list[str] | None:
        name = key.lower()
        if name == "aws:sourceip":
            client = self.request.scope.get("client") if self.request is not None else None
            return [client[0]] if client else None
        if name == "aws:securetransport":
            scheme = self.request.scope.get("scheme", "http") if self.request is not None else "http"
            return ["true" if scheme == "https" else "false"]
        if name == "aws:currenttime":
            return [datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")]
        if name == "aws:epochtime":
            return [str(int(time.time()))]
        if name in ("aws:username", "aws:userid", "aws:principalarn"):
            if self.identity.anonymous:
                return None
            return [self.identity.name if name == "aws:username" else self.identity.access_key]
        if name == "aws:principaltype":
            return ["Anonymous" if self.identity.anonymous else "User"]
        if name == "aws:referer":
            return self._header("referer")
        if name == "aws:useragent":
            return self._header("user-agent")
        if name in ("s3:prefix", "s3:delimiter", "s3:max-keys"):
            param = name[3:]
            if param == "prefix" and self.action in LIST_ACTIONS:
                return [self.query.get("prefix", "")]
            return [self.query[param]] if param in self.query else None
        if name == "s3:versionid":
            return [self.query["versionId"]] if "versionId" in self.query else None
        if name == "s3:signatureversion":
            if not self.auth_scheme:
                return None
            return ["AWS4-HMAC-SHA256" if self.auth_scheme.startswith("sigv4") else "AWS"]
        if name == "s3:authtype":
            if not self.auth_scheme:
                return None
            return [
                "REST-QUERY-STRING"
                if self.auth_scheme.endswith("query")
                else "POST"
                if self.auth_scheme == "post"
                else "REST-HEADER"
            ]
        if name.startswith("s3:requestobjecttag/") or name == "s3:requestobjecttagkeys":
            raw = self._header("x-amz-tagging")
            if raw is None:
                return None
            tags = dict(parse_qsl(raw[0], keep_blank_values=True))
            if name == "s3:requestobjecttagkeys":
                return list(tags)
            tag = key[len("s3:RequestObjectTag/") :]
            return [tags[tag]] if tag in tags else None
        if name.startswith("s3:existingobjecttag/"):
            if self.record is None:
                return None
            tag = key[len("s3:ExistingObjectTag/") :]
            return [self.record.meta.tags[tag]] if tag in self.record.meta.tags else None
        if name.startswith("s3:x-amz-"):
            return self._header(name[3:])
        return None

    def _header(self, name: str) -> list[str] | None:
        value = self._headers.get(name)
        return [value] if value is not None else None
