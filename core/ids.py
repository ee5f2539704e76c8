"""Time-ordered identifiers.

`uuid7()`: an RFC 9562 version 7 UUID, 48 bits of Unix milliseconds then 74 random bits. Session
ids use it so that the sessions in use sit on the newest pages of the primary-key index however
many ended sessions the table holds (a random version 4 key sends every probe of the per-turn
path to a random page of an index that grows with history; docs/performance.md). The 74 random
bits keep ids unguessable; what the id gives away is when the session started. Python 3.14's
`uuid.uuid7` replaces this once the project runs on it.
"""

import os
import time
import uuid

_VERSION = 0x7 << 76
_VARIANT = 0x2 << 62  # RFC 4122/9562 variant: binary 10


def uuid7(ms: int | None = None) -> uuid.UUID:
    """A version 7 UUID for `ms` (Unix milliseconds; now if None)."""
    ms = time.time_ns() // 1_000_000 if ms is None else ms
    random_bits = int.from_bytes(os.urandom(10), "big")  # 80 bits; 6 give way to version and variant
    value = ((ms & 0xFFFF_FFFF_FFFF) << 80) | random_bits
    value = (value & ~(0xF << 76)) | _VERSION
    value = (value & ~(0x3 << 62)) | _VARIANT
    return uuid.UUID(int=value)


def uuid7_sql(at: str) -> str:
    """The same in SQL, for set-based seeding (PostgreSQL 15 has no uuidv7()): a version 7 UUID
    for the timestamp expression `at`, one per row."""
    return (
        f"(lpad(to_hex(floor(extract(epoch FROM {at}) * 1000)::bigint), 12, '0') || '7'"
        " || substr(md5(random()::text), 1, 3) || substr('89ab', 1 + floor(random() * 4)::int, 1)"
        " || substr(md5(random()::text), 1, 15))::uuid"
    )
