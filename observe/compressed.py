"""Compressed inputs read decompressed, keeping what comes before a damage: a rotation interrupted or a
disk full cuts a gzip short, a bad block corrupts it, and :mod:`gzip` then loses the whole read it was
decompressing (and the lines before the damage with it). Bounded whatever the input: a megabyte of
deflate can make a gigabyte, so each step makes at most OUT_BYTES, and an input that keeps expanding
past MAX_RATIO times what was read of it is cut there, as a damage."""
from __future__ import annotations

import io
import zlib
from typing import BinaryIO


class DamagedInput(EOFError):
    """A compressed input ends early or is corrupt; what came before the damage was read."""


class GzipInput(io.RawIOBase):
    """A gzip stream (members one after another, as ``cat a.gz b.gz`` makes) read decompressed that
    gives every byte before a damage (a cut from an interrupted rotation or a full disk, a bad block)
    and raises :class:`DamagedInput` only on the read after them: :mod:`gzip` raises at once and
    what it decompressed of that read is lost."""

    READ_BYTES = 1 << 20  # compressed bytes read at a time
    OUT_BYTES = 1 << 20  # decompressed bytes made at a time
    # Syslog-shaped lines compress about 15:1 with gzip -6, one 108-byte line repeated a million times
    # 294:1 (measured); deflate's own limit is 1032:1 (a zero byte repeated). Past the first RATIO_FLOOR
    # bytes, an input making more than MAX_RATIO times what was read of it is a bomb, cut there.
    MAX_RATIO = 400
    RATIO_FLOOR = 64 << 20

    def __init__(self, raw: BinaryIO):
        super().__init__()
        self.raw = raw
        self.inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.ready = bytearray()
        self.damage: str | None = None
        self.done = False
        self.started = False  # any byte of the current member read
        self.consumed = 0  # compressed bytes read (some may wait in the decompressor)
        self.produced = 0  # decompressed bytes made

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while not self.done and (size < 0 or len(self.ready) < size):
            self._fill()
        if not self.ready and self.damage:
            message, self.damage = self.damage, None
            raise DamagedInput(message)
        n = len(self.ready) if size < 0 else min(size, len(self.ready))
        out = bytes(self.ready[:n])
        del self.ready[:n]
        return out

    def peek(self, size: int = 1) -> bytes:
        """Up to ``size`` bytes from here on, left to be read (fewer only at the end or a damage)."""
        while not self.done and len(self.ready) < size:
            self._fill()
        return bytes(self.ready[:size])

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def _fill(self) -> None:
        # what the last step had no room to decompress, or past a member's end what follows it
        data = self.inflate.unused_data if self.inflate.eof else self.inflate.unconsumed_tail
        if not data:
            data = self.raw.read(self.READ_BYTES)
            self.consumed += len(data)
        if self.inflate.eof:  # the next member, if any
            if not data.strip(b"\0"):  # trailing zeros (tape-style padding) end the stream
                self.done = True
                return
            self.inflate, self.started = zlib.decompressobj(16 + zlib.MAX_WBITS), False
        if not data:
            self.done = True
            if self.started and not self.inflate.eof:
                self.damage = "compressed file ended before the end-of-stream marker was reached"
            return
        saved = self.inflate.copy()
        before = len(self.ready)
        try:
            self.ready += self.inflate.decompress(data, self.OUT_BYTES)
            self.started = True
        except zlib.error as exc:
            self.done, self.damage = True, f"corrupt gzip data ({exc})"
            self.ready += _salvaged(saved, data)
        self.produced += len(self.ready) - before
        waiting = self.inflate.unused_data if self.inflate.eof else self.inflate.unconsumed_tail
        used = self.consumed - len(waiting)  # what the bytes made so far were made of
        if self.produced > max(self.RATIO_FLOOR, self.MAX_RATIO * used) and not self.done:
            self.done = True
            self.damage = (f"decompresses to over {self.MAX_RATIO} times its size (a decompression bomb?); "
                           f"not read past {self.produced >> 20} MiB")

    def fileno(self) -> int:
        return self.raw.fileno()

    def close(self) -> None:
        try:
            self.raw.close()
        finally:
            super().close()


def _salvaged(inflate, data: bytes) -> bytes:
    """What ``inflate`` gives of ``data`` before the byte it fails on (zlib raises without the output of
    the call that failed): fed again 512 bytes at a time, then the failing piece a byte at a time. No
    more than that call made before it failed (under OUT_BYTES) plus one piece's worth."""
    out = bytearray()
    for at in range(0, len(data), 512):
        saved = inflate.copy()
        try:
            out += inflate.decompress(data[at:at + 512])
        except zlib.error:
            try:
                for i in range(at, min(at + 512, len(data))):
                    out += saved.decompress(data[i:i + 1])
            except zlib.error:
                pass
            break
    return bytes(out)
