"""Every size, range and name pattern of the contract, in one place.

Serializers (api/), admin forms (adminui/) and services read these, so that the API and the
admin refuse exactly the same input; the services check them again, since they are the one
place a rule is enforced. The models' column lengths read them too (changing one then needs a
migration, which `makemigrations --check` in CI asks for)."""

import re
import unicodedata

# Names. A bundle name is also a URL path segment and a scope pattern target.
BUNDLE_NAME_MAX = 100
BUNDLE_NAME_RE = r"^[a-z0-9][a-z0-9._-]{0,99}$"
LABEL_NAME_MAX = 50
LABEL_NAME_RE = r"^[a-z0-9][a-z0-9_-]{0,49}$"
DEFAULT_LABEL = "production"  # what a session starts on when it names neither label nor version

# Free text a person writes: change messages, reasons, descriptions, when_to_use.
TEXT_MAX_CHARS = 10_000

# The content document (registry.canonical).
PROMPT_MAX_CHARS = 200_000
CANONICAL_MAX_BYTES = 1024 * 1024
# Always fullmatch: with .match, "$" also matches before a trailing newline ("lookup\n").
TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")

# Sessions. The lease: a session lives ttl_seconds past its last fetch or heartbeat.
EXTERNAL_ID_MAX = 200
TTL_MIN_SECONDS = 1
TTL_MAX_SECONDS = 604_800  # one week
TTL_DEFAULT_SECONDS = 1_800

# API keys.
API_KEY_NAME_MAX = 100
SCOPE_RE = re.compile(r"^[a-z0-9*?][a-z0-9._*?-]{0,99}$")

# Single sign-on: what is kept of a provider's claims (adminui.sso). A longer issuer, subject or
# user name refuses the sign-in; of the group claim, at most SSO_GROUPS_MAX entries of at most
# SSO_GROUP_MAX characters are read (the rest are ignored, never stored).
SSO_ISSUER_MAX = 500
SSO_SUBJECT_MAX = 255
SSO_USERNAME_MAX = 150  # django.contrib.auth's User.username
SSO_EMAIL_MAX = 254
SSO_GROUPS_MAX = 500
SSO_GROUP_MAX = 256

# Request bodies over this are refused with 413 before anything reads them.
REQUEST_BODY_MAX_BYTES = 2 * 1024 * 1024
# What the 413 says, on every lane: the message, and in `details` how to get under the limit.
TOO_LARGE_MESSAGE = "The request body is over 2 MiB."
TOO_LARGE_DETAILS = {
    "body": [
        "Compact the conversation locally first (the Python client: session.compact(messages, local=True), "
        "the registry's compaction run in-process) and send the result, or a shorter `window` of it; a "
        "single tool result over 2 MiB never fits: cut it before sending."
    ]
}

# Pages of lists: the default and the most a client may ask for with ?limit=; versions carry
# their content (up to CANONICAL_MAX_BYTES each), so their pages are smaller.
PAGE_SIZE = 50
PAGE_SIZE_MAX = 200
VERSION_PAGE_SIZE = 20
# Dependents (bundles that include a bundle) a publish or label move answer lists, by including
# bundle name; `dependents_total` says how many there are and GET .../dependents/ pages them all.
DEPENDENTS_MAX = 100

# Percentage rollouts: how many versions one label may split over, and moves per release.
MAX_SPLIT_TARGETS = 10
RELEASE_MAX_MOVES = 50
# `promptreg import`: the versions of one source prompt in one request (docs/importing.md).
IMPORT_MAX_VERSIONS = 200
IMPORT_MAX_LABELS = 50

# Label policies (PATCH .../labels/{label}/) and the checks CI reports for a version's content.
CHECK_NAME_MAX = 64
CHECK_NAME_RE = r"^[a-z0-9][a-z0-9._-]{0,63}$|^eval:[a-z0-9][a-z0-9._-]{0,58}$"
# `eval:<suite>` names the check an evaluation run reports (evals.services), with its attestation;
# no one reports it by hand, but a label may require it.
EVAL_CHECK_PREFIX = "eval:"
CHECK_SUMMARY_MAX = 2_000
CHECK_DETAILS_URL_MAX = 2_000
REQUIRED_CHECKS_MAX = 20
REQUIRED_APPROVALS_MAX = 10


def is_bundle_name(value: object) -> bool:
    """Whether `value` can name a bundle (BUNDLE_NAME_RE): anything else names none."""
    return isinstance(value, str) and re.fullmatch(BUNDLE_NAME_RE, value) is not None


def storable(value: str) -> bool:
    """Text PostgreSQL can store and a response can carry: no NUL, no lone surrogate (a
    "\\ud800" escape decodes to one; UTF-8 cannot encode it)."""
    if "\x00" in value:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


# Characters that change how a name is shown without being seen: bidi controls (U+202A..U+202E,
# U+2066..U+2069), the direction marks (U+200E, U+200F, U+061C), zero-width characters
# (U+200B..U+200D, U+2060), the BOM, soft hyphen, line and paragraph separators, and control
# characters. By Unicode category, so the whole class is covered, not a list that ages.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def invisible_characters(value: str) -> list[str]:
    """The characters of `value` that could make two names look the same (U+XXXX each, in order,
    without repeats); empty when there are none."""
    found: dict[str, None] = {}
    for char in value:
        if unicodedata.category(char) in _INVISIBLE_CATEGORIES:
            found.setdefault(f"U+{ord(char):04X}", None)
    return list(found)


def normal_name(value: str) -> str:
    """A name as it is stored and looked up: Unicode NFC, so that an accented letter typed as
    one code point or as a letter and a combining mark is one name."""
    return unicodedata.normalize("NFC", value)
