"""The frontend's stop-string matcher over a stream (tritonllm.openai.stops)."""

from __future__ import annotations

import pytest

from tritonllm.openai.stops import StopMatcher


def run(stops: tuple[str, ...], pieces: list[str]) -> tuple[list[str], bool]:
    matcher = StopMatcher(stops)
    out = []
    for piece in pieces:
        out.append(matcher.feed(piece))
        if matcher.stopped:
            break
    else:
        out.append(matcher.flush())
    return out, matcher.stopped


@pytest.mark.parametrize(("stops", "pieces", "released", "stopped"), [
    # No stop strings: everything at once.
    ((), ["hello", " world"], ["hello", " world", ""], False),
    # The stop inside one piece: cut before it.
    (("END",), ["one ENDtwo"], ["one "], True),
    # Across two pieces: "EN" is held back until "D" decides it.
    (("END",), ["one EN", "D two"], ["one ", ""], True),
    # Held back, then released when it turns out not to be a stop.
    (("END",), ["one EN", "X"], ["one ", "ENX", ""], False),
    # Held back to the end of the generation: released by flush.
    (("END",), ["one E"], ["one ", "E"], False),
    # Across three pieces, one character each.
    (("</s>",), ["a<", "/", "s", ">b"], ["a", "", "", ""], True),
    # Of two stops, the earlier in the text wins.
    (("b", "a"), ["xab"], ["x"], True),
    # A longer partial match is held although a shorter stop could start later.
    (("abc", "bd"), ["zab", "d"], ["z", "a"], True),
])
def test_stop_strings_over_a_stream(stops: tuple[str, ...], pieces: list[str],
                                    released: list[str], stopped: bool) -> None:
    assert run(stops, pieces) == (released, stopped)


def test_nothing_after_a_stop() -> None:
    matcher = StopMatcher(("x",))
    assert matcher.feed("ax") == "a" and matcher.stopped
    assert matcher.feed("more") == "" and matcher.flush() == ""


def test_whatever_the_chunking_the_text_is_the_same() -> None:
    text = "the quick brown fox STOP jumps"
    for size in range(1, len(text) + 1):
        pieces = [text[i:i + size] for i in range(0, len(text), size)]
        out, stopped = run(("STOP", "STOMP"), pieces)
        assert "".join(out) == "the quick brown fox " and stopped, size
