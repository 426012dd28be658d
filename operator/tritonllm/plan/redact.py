"""Log text that goes into a status: secrets taken out, length bounded.

A failed build's log tail (its container termination message) is copied into the deployment's
conditions, its Events and the engine record, which anyone who may read those objects sees: far
more people than may read the token Secret. A download step, a converter or a user's tool may
print a token (an error echoing a URL with credentials, a traceback showing an environment), so
everything that looks like one is replaced before the text leaves the pod's world: known token
formats (Hugging Face `hf_...`, NGC `nvapi-...`, JWTs), `Authorization` values, `name=value` and
`"name": "value"` pairs whose name says token, password, secret or key, credentials in URLs, and
long hex or base64 runs. Redaction runs before shortening, so no cut can leave half a secret
that the patterns no longer recognise. Over-redaction is preferred to a leak.
"""

from __future__ import annotations

import re

# The longest log tail kept in a status message (its last characters: the error is at the end).
MAX_TAIL_CHARS = 1500
MASK = "[redacted]"

_NAME = (
    r"[A-Za-z0-9_.-]*(?:token|passw(?:or)?d|pwd|secret|api[_-]?key|access[_-]?key|credential)s?"
)

_VALUE = r"\"[^\"]*\"|'[^']*'|[^\s,;&\"']+"

_SECRET_LOOKING = r"\"[^\"]*\"|'[^']*'|(?=\S*[0-9])[^\s,;&\"']{8,}"

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Authorization header values: "Bearer <token>", "Basic <base64>".
    (re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{8,}"), rf"\1\2{MASK}"),
    # Known token formats: Hugging Face, NGC (nvapi-), GitHub, JWTs.
    (re.compile(r"\bhf_[A-Za-z0-9]{8,}"), f"hf_{MASK}"),
    (re.compile(r"\bnvapi-[A-Za-z0-9_-]{8,}"), f"nvapi-{MASK}"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), MASK),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"), MASK),
    # Credentials in a URL: scheme://user:password@host.
    (re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+@"), rf"\1{MASK}@"),
    # name=value where the name says what the value is (HF_TOKEN=..., --password=...,
    # api_key="...", NGC_KEY=...), and name: value in JSON or YAML ("token": "...") when the
    # value is quoted or looks like a secret (8+ characters with a digit, so that "token:
    # expired" keeps its meaning).
    (
        re.compile(rf"(?i)(\b(?:{_NAME}|[A-Za-z0-9_.-]*key)[\"']?\s*=\s*)({_VALUE})"),
        rf"\1{MASK}",
    ),
    (
        re.compile(rf"(?i)(\b{_NAME}[\"']?\s*:\s*)({_SECRET_LOOKING})"),
        rf"\1{MASK}",
    ),
    # A command-line flag and its value: --token <value>.
    (re.compile(rf"(?i)(--{_NAME}\s+)({_VALUE})"), rf"\1{MASK}"),
    # Long hex (32+) and base64 (40+, mixed case and digits) runs; image digests stay readable.
    (re.compile(r"(?<![A-Za-z0-9])(?<!sha256[:=])[0-9a-fA-F]{32,}(?![A-Za-z0-9])"), MASK),
]

_BASE64 = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{40,}={0,2}(?![A-Za-z0-9+/=_-])")


def _base64_secret(m: re.Match[str]) -> str:
    """A run of base64 characters is a secret when it mixes upper and lower case and digits,
    unless it reads as a path (one alphabet has "/", the URL-safe one "-" and "_", never both; a
    random 40+ character run has a long stretch without "/")."""
    run = m.group(0)
    mixed = all(re.search(cls, run) for cls in ("[a-z]", "[A-Z]", "[0-9]"))
    if "/" in run and (re.search("[-_]", run) or max(map(len, run.split("/"))) < 20):
        return run
    return MASK if mixed else run


def redact(text: str) -> str:
    """`text` with everything that looks like a secret replaced by [redacted]."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return _BASE64.sub(_base64_secret, text)


def log_tail(text: str, limit: int = MAX_TAIL_CHARS) -> str:
    """A log text fit for a status: redacted, then its last `limit` characters (from a line
    start where one is near, marked with "...")."""
    text = redact(text.strip())
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    newline = cut.find("\n")
    if 0 <= newline < limit // 4:
        cut = cut[newline + 1:]
    return "..." + cut
