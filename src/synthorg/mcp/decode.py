"""Content-Encoding decoding in bounded steps: no step yields more than STEP bytes.

Decoders are chained (``gzip, gzip`` is decoded twice, last applied first) and pulled lazily,
so the consumer stops the whole chain the moment it has enough: a decompression bomb costs at
most the bytes the consumer asked for, a few STEP-sized buffers, and no long blocking call.
Supported: gzip (multi-member), deflate (zlib-wrapped or raw), identity. Brotli and zstd are
refused, not advertised: neither decoder in reach bounds one call's output.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

STEP = 64 * 1024
SUPPORTED = ("gzip", "deflate")
ACCEPT_ENCODING = "gzip, deflate"


class DecodeError(ValueError):
    """The body cannot be decoded (unsupported or corrupt encoding)."""


class _Inflater:
    """One gzip or deflate layer, fed compressed bytes, emitting at most STEP per call."""

    def __init__(self, encoding: str) -> None:
        self._gzip = encoding in ("gzip", "x-gzip")
        self._obj: zlib._Decompress | None = None
        self._head = b""  # deflate: bytes held until the zlib header can be recognised

    def _new(self, first: bytes) -> zlib._Decompress:
        if self._gzip:
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        # "deflate" is zlib-wrapped per RFC 9110, but some servers send raw deflate.
        wrapped = (first[0] & 0x0F) == 8 and ((first[0] << 8) | first[1]) % 31 == 0
        return zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._obj is None:
            if not self._gzip:
                self._head += data
                if len(self._head) < 2:
                    return
                data, self._head = self._head, b""
            self._obj = self._new(data)
        while data:
            try:
                out = self._obj.decompress(data, STEP)
            except zlib.error as exc:
                raise DecodeError(f"corrupt compressed body: {exc}") from exc
            if out:
                yield out
            if self._obj.eof:
                # gzip may hold several members back to back; anything after a deflate end
                # is garbage and ignored.
                data = self._obj.unused_data if self._gzip else b""
                if data:
                    self._obj = self._new(data)
            else:
                data = self._obj.unconsumed_tail

    def flush(self) -> Iterator[bytes]:
        if self._obj is not None and not self._obj.eof:
            # A truncated stream: what decoded so far is kept, bounded like the rest.
            tail = self._obj.flush(STEP)
            if tail:
                yield tail


class BodyDecoder:
    """Decodes a body sent with the given Content-Encoding values, step by bounded step."""

    def __init__(self, content_encoding: str) -> None:
        codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
        codings = [c for c in codings if c != "identity"]
        unknown = [c for c in codings if c not in (*SUPPORTED, "x-gzip")]
        if unknown:
            raise DecodeError(
                f"unsupported Content-Encoding {', '.join(unknown)!r} (supported: gzip, deflate)"
            )
        # The last coding listed was applied last: it is undone first.
        self._layers = [_Inflater(c) for c in reversed(codings)]

    def _through(self, index: int, pieces: Iterator[bytes]) -> Iterator[bytes]:
        if index == len(self._layers):
            yield from pieces
            return
        layer = self._layers[index]
        for piece in pieces:
            yield from self._through(index + 1, layer.feed(piece))

    def feed(self, data: bytes) -> Iterator[bytes]:
        """Decoded pieces of ``data`` (each at most STEP bytes), lazily."""
        if not self._layers:
            for start in range(0, len(data), STEP):
                yield data[start : start + STEP]
            return
        yield from self._through(0, iter((data,)))

    def flush(self) -> Iterator[bytes]:
        """What the layers still hold at the end of the body."""
        for index, layer in enumerate(self._layers):
            yield from self._through(index + 1, layer.flush())
