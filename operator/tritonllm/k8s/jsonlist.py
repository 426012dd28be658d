"""A list answer of the API server read one item at a time, as its bytes arrive.

A list of every object of a kind holds whatever anyone put in them: a few hundred objects of a
MiB each (thousands of owner references or labels) make an answer of hundreds of MiB, several
times that once parsed whole. Parsed item by item, each handed to `each` (which keeps what it
needs of it) before the next is read, what the process holds at once is one item and the read
buffer, whatever the answer's size.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Awaitable, Callable
from typing import Any

READ_BYTES = 1 << 16
ITEMS = '"items":'  # the API server writes kind, apiVersion and metadata before it
WHITESPACE = " \t\r\n"


class _Reader:
    def __init__(self, read: Callable[[int], Awaitable[bytes]]) -> None:
        self._read = read
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self.text, self.pos, self.eof = "", 0, False

    async def more(self, unparsed: int) -> None:
        """Drop what was parsed; read until `unparsed` characters wait (or the answer ended)."""
        parts, have = [self.text[self.pos:]], len(self.text) - self.pos
        while have < unparsed and not self.eof:
            chunk = await self._read(READ_BYTES)
            self.eof = not chunk
            parts.append(self._utf8.decode(chunk, final=self.eof))
            have += len(parts[-1])
        self.text, self.pos = "".join(parts), 0

    async def skip(self, chars: str) -> str:
        """The first character not in `chars` ("" at the end)."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in chars:
                self.pos += 1
            if self.pos < len(self.text) or self.eof:
                return self.text[self.pos:self.pos + 1]
            await self.more(READ_BYTES)


async def list_items(
    read: Callable[[int], Awaitable[bytes]], each: Callable[[dict[str, Any]], Any]
) -> tuple[list[Any], dict[str, Any]]:
    """What `each` makes of every item of the list answer that `read(n)` returns (up to n bytes
    at a time, b"" at its end), and the list's metadata."""
    r = _Reader(read)
    while (at := r.text.find(ITEMS)) < 0 and not r.eof:
        await r.more(2 * len(r.text) + READ_BYTES)
    if at < 0:  # no items at all
        whole = json.loads(r.text) if r.text.strip() else {}
        return [], whole.get("metadata") or {}
    head = json.loads(r.text[:at].rstrip().rstrip(",") + "}")
    r.pos = at + len(ITEMS)
    decoder, out = json.JSONDecoder(), []
    if await r.skip(WHITESPACE) == "[":
        r.pos += 1
        while (first := await r.skip(WHITESPACE + ",")) not in ("]", ""):
            try:
                item, r.pos = decoder.raw_decode(r.text, r.pos)
            except json.JSONDecodeError:
                if r.eof:
                    raise
                await r.more(2 * (len(r.text) - r.pos) + READ_BYTES)  # the item is not all here
                continue
            out.append(each(item))
            del item  # not held while the next one is parsed
        if first != "]":
            raise json.JSONDecodeError("the list ended before its items did", r.text, r.pos)
        await r.more(1 << 62)  # what follows the items: "}", or fields written after them
        tail = r.text[r.pos + 1:].strip().lstrip(",").strip()
        if tail not in ("", "}"):
            head.update(decoder.raw_decode("{" + tail)[0])
    return out, head.get("metadata") or {}
