"""Log text that goes into a status: secrets taken out, length bounded.

A failed build's log tail (its container termination message) is copied into the deployment's
conditions, its Events and the engine record, which anyone who may read those objects sees: far
more people than may read the token Secret. A download step, a converter or a user's tool may
print a token (an error echoing a URL with credentials, a traceback showing an environment), so
everything that looks like one is replaced before the text leaves the pod's world: known token
formats (Hugging Face `hf_...`, NGC `nvapi-...`, GitHub, JWTs), `Authorization` values,
`name=value`, `"name": "value"` and `--name value` where the name says token, password, secret
or key (`=` also URL-encoded, `%3D`), AWS secret access keys and session tokens, credentials in
URLs, and long hex or base64 runs. A token is found inside a word too when what precedes it is
an escape (`%3D`, a literal `\\t`): logs print URLs and JSON escaped. Over-redaction is
preferred to a leak.

The text is written by the pod, which may be anyone's, so the work is linear in its length: it
is matched line by line, and every pattern either starts at a fixed word (a keyword, a token
prefix) and reads a bounded stretch, or starts only where a run of its characters starts, so no
character is read from more than a few starting points (an unbounded name prefix, read again
from every letter of a long word, made a 4 KiB message cost seconds). `log_tail` redacts only
the last lines, those that can reach the status.
"""

from __future__ import annotations

import re

# The longest log tail kept in a status message (its last characters: the error is at the end).
MAX_TAIL_CHARS = 1500
MASK = "[redacted]"
# A longer line is kept by its end; the word its cut splits is masked whole (it may be the rest
# of a secret that the patterns no longer recognise).
MAX_LINE_CHARS = 4 * MAX_TAIL_CHARS

# Words that end a name whose value is a secret. The match starts at the word, not at the start
# of the name (`HF_TOKEN`, `x-api-key`): the name's head is kept as text either way.
_NAME = r"(?:token|passw(?:or)?d|pwd|secret|api[_-]?key|access[_-]?key|credential)s?"
_ANY_KEY = rf"(?:{_NAME}|keys?)"
# After a keyword, how an assignment is written: `=`, or `=` URL-encoded in a query string.
_ASSIGN = r"[\"']?[ \t]*(?:=|%3[dD])[ \t]*"
_VALUE = r"\"[^\"\n]*\"|'[^'\n]*'|[^\s,;&\"']+"
# Where a token may start inside a word: after a URL escape (`%3D`) or a backslash escape.
_ESCAPED = r"(?<=%[0-9A-Fa-f]{2})|(?<=\\[nrt])"

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Authorization header values: "Bearer <token>", "Basic <base64>" (also tab- or %20-spaced,
    # and with a literal "\t" from an escaped log).
    (re.compile(r"(?i)(?<![A-Za-z])(bearer|basic)((?:[ \t]|\\t|%20|%09){1,8})"
                r"[A-Za-z0-9._~+/=-]{8,}"), rf"\1\2{MASK}"),
    # Known token formats: Hugging Face, NGC (nvapi-), GitHub, JWTs. A match cannot fail once its
    # prefix is found (no backtracking), except the JWT's, which starts only where its run does.
    (re.compile(rf"(?:(?<![A-Za-z0-9_])|{_ESCAPED})hf_[A-Za-z0-9]{{8,}}"), f"hf_{MASK}"),
    (re.compile(r"nvapi-[A-Za-z0-9_-]{8,}"), f"nvapi-{MASK}"),
    (re.compile(r"gh[pousr]_[A-Za-z0-9]{20,}"), MASK),
    (re.compile(rf"(?:(?<![A-Za-z0-9_-])|{_ESCAPED})"
                r"eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"), MASK),
    # Credentials in a URL: scheme://user:password@host.
    (re.compile(r"(://[^\s:/@]+:)[^\s@/]+@"), rf"\1{MASK}@"),
    # name=value where the name says what the value is (HF_TOKEN=..., --password=...,
    # api_key="...", NGC_KEY=..., ?token%3D...).
    (re.compile(rf"(?i)({_ANY_KEY}{_ASSIGN})({_VALUE})"), rf"\1{MASK}"),
    # AWS credentials, whatever separates name and value (`aws configure set
    # aws_secret_access_key VALUE`, a credentials file, an environment dump).
    (re.compile(r"(?i)((?:secret[_-]?access[_-]?key|session[_-]?token)[\"']?"
                rf"(?:[ \t]*[:=][ \t]*|[ \t]+))({_VALUE})"), rf"\1{MASK}"),
    # A command-line flag and its value: --token <value> (a flag starts a word; its name's head
    # before the keyword is bounded).
    (re.compile(rf"(?i)((?<![A-Za-z0-9_.-])--[A-Za-z0-9_.-]{{0,40}}?{_NAME}[ \t]+)({_VALUE})"),
     rf"\1{MASK}"),
    # Long hex (32+) runs; image digests stay readable.
    (re.compile(rf"(?:(?<![A-Za-z0-9])|{_ESCAPED})(?<!sha256[:=])[0-9a-fA-F]{{32,}}"
                r"(?![A-Za-z0-9])"), MASK),
]

# name: value in JSON or YAML ("token": "...") when the value is quoted or looks like a secret
# (8+ characters with a digit, so that "token: expired" keeps its meaning; see _colon_value).
_COLON = re.compile(rf"(?i)({_NAME}[\"']?[ \t]*:[ \t]*)({_VALUE})")

_BASE64 = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{40,}={0,2}(?![A-Za-z0-9+/=_-])")


def _colon_value(m: re.Match[str]) -> str:
    value = m.group(2)
    quoted = value[0] in "\"'"
    looks_secret = len(value) >= 8 and any(ch.isdigit() for ch in value)
    return m.group(1) + MASK if quoted or looks_secret else m.group(0)


def _base64_secret(m: re.Match[str]) -> str:
    """A run of base64 characters is a secret when it mixes upper and lower case and digits,
    unless it reads as a path (one alphabet has "/", the URL-safe one "-" and "_", never both; a
    random 40+ character run has a long stretch without "/")."""
    run = m.group(0)
    mixed = all(re.search(cls, run) for cls in ("[a-z]", "[A-Z]", "[0-9]"))
    if "/" in run and (re.search("[-_]", run) or max(map(len, run.split("/"))) < 20):
        return run
    return MASK if mixed else run


def _redact_line(line: str) -> str:
    for pattern, replacement in _PATTERNS:
        line = pattern.sub(replacement, line)
    line = _COLON.sub(_colon_value, line)
    return _BASE64.sub(_base64_secret, line)


def redact(text: str) -> str:
    """`text` with everything that looks like a secret replaced by [redacted]."""
    return "\n".join(_redact_line(line) for line in text.split("\n"))


def _line_end(line: str) -> str:
    """A line of at most MAX_LINE_CHARS: a longer one's end, the word its cut splits masked."""
    if len(line) <= MAX_LINE_CHARS:
        return line
    cut = line[-MAX_LINE_CHARS:]
    space = re.search(r"\s", cut)
    return MASK + (cut[space.start():] if space else "")


def log_tail(text: str, limit: int = MAX_TAIL_CHARS) -> str:
    """A log text fit for a status: redacted, then its last `limit` characters (from a line
    start where one is near, marked with "..."). Only the last lines that can reach those
    characters are redacted (whole lines: a secret never spans two)."""
    kept: list[str] = []
    size = -1
    for line in reversed(text.strip().split("\n")):
        kept.append(_redact_line(_line_end(line)))
        size += len(kept[-1]) + 1
        if size > limit:
            break
    text = "\n".join(reversed(kept))
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    newline = cut.find("\n")
    if 0 <= newline < limit // 4:
        cut = cut[newline + 1:]
    return "..." + cut
