"""A failed Job's log tail reaches the status redacted of anything that looks like a secret, and
short."""

from __future__ import annotations

import time

import pytest

from tritonllm.plan.observed import JobObs, termination_message
from tritonllm.plan.redact import MASK, MAX_LINE_CHARS, MAX_TAIL_CHARS, log_tail, redact

HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
NGC = "nvapi-Zx9_Yw8-Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"
HEX = "3f9a0c27d41b8e65f0a2c9d8b7e6f5a4c3b2a1908f7e6d5c"
B64 = "dGhpcyBpcyBhIHNlY3JldCBrZXkgdGhhdCBpcyBsb25nZXIgdGhhbiBmb3J0eQ=="
SECRETS = [HF, NGC, JWT, HEX, B64, "s3cr3t-pa55", "Tr0ub4dor&3", "AKIAIOSFODNN7EXAMPLEKEY1"]

# (log line, what must be gone, what must stay)
CASES = [
    (f"HTTP 401 for https://huggingface.co/api/models/x using token {HF}", HF,
     "HTTP 401 for https://huggingface.co/api/models/x using token hf_"),
    (f"Authorization: Bearer {HF}", HF, "Authorization: Bearer " + MASK),
    (f"curl -H 'Authorization: Basic {B64}' https://x", B64, "curl -H 'Authorization: Basic"),
    (f"ngc registry login failed for key {NGC}", NGC, "ngc registry login failed for key nvapi-"),
    (f"NGC_API_KEY={NGC} ./download.sh", NGC, "NGC_API_KEY=" + MASK),
    ("HF_TOKEN=s3cr3t-pa55 python3 convert.py", "s3cr3t-pa55", "HF_TOKEN=" + MASK + " python3"),
    ("connecting with password='Tr0ub4dor&3' to db", "Tr0ub4dor&3", "password=" + MASK),
    ('{"api_key": "AKIAIOSFODNN7EXAMPLEKEY1", "region": "us"}', "AKIAIOSFODNN7EXAMPLEKEY1",
     '"region": "us"'),
    ("aws s3 cp --secret s3cr3t-pa55 s3://b/k .", "s3cr3t-pa55", "--secret " + MASK),
    ("key=s3cr3t-pa55&user=me", "s3cr3t-pa55", "key=" + MASK + "&user=me"),
    ("pip install from https://me:s3cr3t-pa55@pypi.example.com/simple", "s3cr3t-pa55",
     "https://me:" + MASK + "@pypi.example.com/simple"),
    (f"session {JWT} expired", JWT, "session " + MASK + " expired"),
    (f"loaded secret {HEX} from cache", HEX, "loaded secret " + MASK + " from cache"),
    (f"payload {B64}", B64, "payload " + MASK),
]


@pytest.mark.parametrize(("line", "secret", "kept"), CASES, ids=range(len(CASES)))
def test_secrets_are_redacted_and_the_rest_is_kept(line: str, secret: str, kept: str) -> None:
    out = redact(line)
    assert secret not in out
    assert kept in out, out
    assert redact(out) == out  # idempotent: redacting a status message again changes nothing


def test_ordinary_build_errors_stay_readable() -> None:
    lines = [
        "trtllm-build: CUDA out of memory. Tried to allocate 2.00 GiB",
        "File \"/usr/local/lib/python3.10/dist-packages/tensorrt_llm/builder.py\", line 412",
        "[download] token: expired",  # no secret in it: the words stay
        "the tokenizer at /store/models/hf/meta-llama/Llama-2-7b-hf/main has no tokenizer.json",
        "image nvcr.io/nvidia/tritonserver@sha256:"
        "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9 not found",
        "rank 3: world size 8 does not match the engine's tp 4 x pp 1",
    ]
    for line in lines:
        assert redact(line) == line


def test_a_long_tail_is_cut_to_its_end_after_redaction() -> None:
    lines = [f"step {i}: converting layer {i}" for i in range(400)]
    text = "\n".join([f"HF_TOKEN={HF}", *lines, f"fatal: bad credentials {HF}"])
    tail = log_tail(text)
    assert len(tail) <= MAX_TAIL_CHARS + 3
    assert tail.startswith("...step ")  # from a line start
    assert tail.endswith(f"fatal: bad credentials hf_{MASK}")
    # A secret cut in half by the limit would escape the patterns: redaction runs first.
    cut_here = "x" * (MAX_TAIL_CHARS - 10)
    assert HF[-12:] not in log_tail(f"{HF}{cut_here}")


def test_a_failed_jobs_status_message_is_redacted_and_bounded() -> None:
    message = "\n".join([f"line {i}" for i in range(2000)] + [f"401: token {HF} rejected"])
    pod = {
        "metadata": {"creationTimestamp": "2026-11-22T09:00:00Z"},
        "status": {"containerStatuses": [{"name": "build", "state": {"terminated": {
            "exitCode": 12, "reason": "Error", "message": message}}}]},
    }
    job = {"metadata": {"uid": "j1"}, "status": {"conditions": [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
         "message": f"Job failed; api_key={NGC}"}]}}
    obs = JobObs.of(job, [pod])
    assert obs.phase == "Failed"
    assert obs.message.startswith("container build exited with code 12 (Error): ...")
    assert obs.message.endswith(f"401: token hf_{MASK} rejected")
    assert len(obs.message) < MAX_TAIL_CHARS + 100
    assert HF not in obs.message and HF not in termination_message([pod])
    # Without pods to read, the Job's own message is redacted too.
    assert NGC not in JobObs.of(job).message
    for secret in SECRETS:
        assert secret not in obs.message


# A Hugging Face token as issued: hf_ and 34 characters (shorter than the base64 runs caught
# whatever their context).
HF34 = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
AWS = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

# Secrets that are not at a word boundary (URL-encoded, escaped in a printed string), and AWS
# keys however their name and value are separated: (log line, what must be gone, what stays).
INSIDE_WORDS = [
    (f"GET /login?next=%2Fapi%3Ftoken%3D{HF34}&a=1 HTTP/1.1", HF34, "%3Ftoken%3D"),
    (f"redirect=%2Fcb%3Fx%3D{HF34}", HF34, "redirect=%2Fcb%3Fx%3Dhf_" + MASK),
    (f"headers={{'Authorization': 'Bearer\\t{HF34}'}}", HF34, "'Authorization': 'Bearer\\t"),
    (f"Authorization: Bearer\t{HF34}", HF34, "Authorization: Bearer\t" + MASK),
    (f"callback /cb%23{JWT}", JWT, "callback /cb%23" + MASK),
    (f"aws configure set aws_secret_access_key {AWS}", AWS,
     "aws configure set aws_secret_access_key " + MASK),
    (f"AWS_SECRET_ACCESS_KEY {AWS} exported", AWS, " exported"),
    (f"aws_secret_access_key = {AWS}", AWS, "aws_secret_access_key = " + MASK),
]


@pytest.mark.parametrize(("line", "secret", "kept"), INSIDE_WORDS, ids=range(len(INSIDE_WORDS)))
def test_secrets_inside_words_and_aws_keys_are_redacted(line: str, secret: str, kept: str) -> None:
    out = redact(line)
    assert secret not in out, out
    assert kept in out, out
    assert redact(out) == out


def test_words_that_only_contain_a_token_prefix_stay_readable() -> None:
    lines = [
        "loading weights with convert_hf_checkpoint from /store/models/hf/llama",
        "trtllm-build --max_input_len 2048 --max_batch_size 8 --gemm_plugin auto",
        "a bearer of bad news: nothing",
    ]
    for line in lines:
        assert redact(line) == line


# Text that made a pattern start over at every character (an unbounded name head, a JWT or a
# URL scheme read to the end of its run, a lookahead over the rest of a word, a flag's name).
ADVERSARIAL = ["-a", "a.", "eyJ", "a_eyJ", "%3DeyJa", "\\teyJa", "eyJa.", "token:", 'token="',
               "--a", "-", "://a:", "Bearer ", "hf_", "tokentoken", "aws_secret_access_key "]


def _repeat(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


def _seconds(text: str, runs: int = 5) -> float:
    """The fastest of a few runs of redact (the least disturbed by anything else running)."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        redact(text)
        best = min(best, time.perf_counter() - start)
        if best > 0.25:  # far beyond linear already: no need to wait for more
            break
    return best


@pytest.mark.parametrize("unit", ADVERSARIAL)
def test_redaction_time_is_linear_in_the_length_of_adversarial_text(unit: str) -> None:
    small = _seconds(_repeat(unit, 8192))
    assert small < 0.05, small  # 8 KiB of "-a" took seconds
    # 8 times the text: linear is 8x the time, quadratic 64x; the margin absorbs a loaded machine
    large = _seconds(_repeat(unit, 65536))
    assert large < 24 * small + 0.01, (small, large)


def test_a_64_kib_adversarial_message_is_redacted_at_once() -> None:
    assert _seconds(_repeat("-a", 2048), runs=1) < 0.05  # 2 KiB of "-a" cost 0.4 s
    for unit in ADVERSARIAL:
        assert _seconds(_repeat(unit, 65536), runs=1) < 0.5, unit
        # and a status message of it costs no more (only its last lines are redacted)
        assert len(log_tail(_repeat(unit, 65536))) <= MAX_TAIL_CHARS + 3


def test_a_line_cut_to_its_end_keeps_no_part_of_a_secret() -> None:
    rest = " then " + "z" * (MAX_LINE_CHARS - 20)
    line = f"HF_TOKEN {HF}{rest}"  # the cut falls inside the token
    assert len(line) > MAX_LINE_CHARS
    tail = log_tail(line, limit=2 * MAX_LINE_CHARS)
    assert HF[-8:] not in tail and tail.startswith(MASK) and tail.endswith(rest)
