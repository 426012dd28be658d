"""A TCP forwarder: ``python -m tritonllm_dev.forward LISTEN_HOST:PORT TARGET_HOST:PORT``.

The API server listens on 127.0.0.1 only; pods of the real node reach it as
``kubernetes.default`` through kube-proxy, whose endpoint is this forwarder on the bridge
gateway. TLS passes through untouched (the API server's certificate names the gateway).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


async def serve(listen: str, target: str) -> None:
    thost, tport = _split(target)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(thost, tport)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    host, port = _split(listen)
    server = await asyncio.start_server(handle, host, port, reuse_address=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m tritonllm_dev.forward LISTEN_HOST:PORT TARGET_HOST:PORT")
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args[0], args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
