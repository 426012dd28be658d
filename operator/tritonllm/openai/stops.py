"""Stop strings over a stream of generated text (pure).

The frontend applies `stop` itself, on the generated text: the answer ends before the first
stop string and the request is cancelled. Streamed text that could still become a stop string
(a suffix of what came that is a prefix of one) is held back until the next piece decides it,
so a client never sees part of a stop string, also when one spans two responses.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class StopMatcher:
    stops: tuple[str, ...]
    pending: str = ""  # text seen but not yet released
    stopped: bool = False

    def feed(self, text: str) -> str:
        """The text that can be released after `text` arrived; sets `stopped` at a stop."""
        if self.stopped:
            return ""
        self.pending += text
        cut = min((i for i in (self.pending.find(s) for s in self.stops) if i >= 0),
                  default=-1)
        if cut >= 0:
            self.stopped = True
            out, self.pending = self.pending[:cut], ""
            return out
        keep = self._held()
        out = self.pending[:len(self.pending) - keep]
        self.pending = self.pending[len(self.pending) - keep:]
        return out

    def flush(self) -> str:
        """What was held back, at the end of the generation (it did not become a stop)."""
        out, self.pending = ("" if self.stopped else self.pending), ""
        return out

    def _held(self) -> int:
        """The length of the longest suffix of `pending` that begins some stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(self.pending)), best, -1):
                if self.pending.endswith(stop[:n]):
                    best = n
                    break
        return best
