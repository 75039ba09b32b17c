"""Request timestamps: the ISO 8601 basic form SigV4 signs, and HTTP dates SigV2 uses."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import lru_cache

AMZ_DATE_FORMAT = "%Y%m%dT%H%M%SZ"


# Remembered: every request a client signs within one second carries the same value, and the
# result (a datetime, or None) is immutable.
@lru_cache(maxsize=256)
def parse_amz_date(value: str) -> datetime | None:
    """Parse "20130524T000000Z"; None when it is not exactly that form."""
    # By hand rather than strptime: this runs on every signed request, and strptime was ~2 % of a
    # small GET's CPU.
    digits = value[:8] + value[9:15]
    if len(value) != 16 or value[8] != "T" or value[15] != "Z" or not (digits.isascii() and digits.isdigit()):
        return None
    try:
        return datetime(
            int(value[0:4]),
            int(value[4:6]),
            int(value[6:8]),
            int(value[9:11]),
            int(value[11:13]),
            int(value[13:15]),
            tzinfo=UTC,
        )
    except ValueError:
        return None


def parse_http_date(value: str) -> datetime | None:
    """Parse an RFC 7231 / RFC 2822 date ("Fri, 24 May 2013 00:00:00 GMT"); None if invalid."""
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed is None:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def parse_any_date(value: str) -> datetime | None:
    """Either form: some SigV2 clients send x-amz-date in ISO 8601 basic form."""
    return parse_amz_date(value.strip()) or parse_http_date(value)


def format_amz_date(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(AMZ_DATE_FORMAT)


def utc_now(now: datetime | None) -> datetime:
    """The verifier's notion of now; a naive `now` is taken as UTC."""
    if now is None:
        return datetime.now(UTC)
    if now.tzinfo is None:
        return now.replace(tzinfo=UTC)
    return now
