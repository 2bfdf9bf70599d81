"""TFRecord framing and what a file holds, told from its first bytes (no TensorFlow).

Shared by the pipeline's reader (integrity.py), which must tell a file
compressed otherwise than its manifest says from a damaged one, and by the
data commands (cli/verify.py and the others, through records.py and record_index.py).
"""
from __future__ import annotations

import dataclasses
import zlib

FRAME_BYTES = 16  # length (8), its masked CRC (4), the payload's masked CRC (4)
HEADER_BYTES = 12  # a record's length (8) and the length's masked CRC (4)
STREAM = {"gzip": "GZIP", "zlib": "ZLIB"}


def count(n: int, unit: str) -> str:
    return f"{n:,} {unit}{'s' * (n != 1)}"


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """The masked CRC-32C TFRecord framing stores (only used on 8-byte headers, so plain Python is fast enough)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def is_record_header(head: bytes) -> bool:
    """Whether ``head`` begins with a TFRecord record header whose length checksum is right."""
    return len(head) >= HEADER_BYTES and int.from_bytes(head[8:12], "little") == masked_crc32c(head[:8])


@dataclasses.dataclass(frozen=True)
class Sniffed:
    """What a file holds: kind is 'empty', 'tfrecord' (uncompressed), 'gzip', 'zlib' or 'other'."""

    kind: str
    detail: str = ""  # for 'other': why it is not a TFRecord file

    @property
    def compression(self) -> str | None:
        return self.kind if self.kind in STREAM else None

    def describe(self) -> str:
        return {"tfrecord": "not compressed", "gzip": "GZIP-compressed", "zlib": "ZLIB-compressed",
                "empty": "empty"}.get(self.kind, "not a TFRecord file")


def _first_bytes(data: bytes, show: bool) -> str:
    """', 69 64 2c 78 (b'id,x'),' for messages, or '' when the file's bytes are not to be shown."""
    head = data[:8]
    return f", {head.hex(' ')} ({head!r})," if show else ""


def sniff_bytes(head: bytes, show: bool = True) -> Sniffed:
    """:func:`sniff` on the first bytes of a file (all of it when it is shorter than SNIFF_BYTES).

    ``show``: whether a file that is not TFRecord may be quoted (its first 8 bytes, or its stream's).
    """
    if not head:
        return Sniffed("empty")
    if is_record_header(head):
        return Sniffed("tfrecord")
    if head[:2] == b"\x1f\x8b":
        kind = "gzip"
    elif len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7 and (head[0] * 256 + head[1]) % 31 == 0:
        kind = "zlib"
    elif len(head) < HEADER_BYTES:
        return Sniffed("other", f"it is {count(len(head), 'byte')}, shorter than one record header "
                                f"({HEADER_BYTES} bytes), and not a GZIP or ZLIB stream")
    else:
        return Sniffed("other", f"its first bytes{_first_bytes(head, show)} are neither a TFRecord record header "
                                "(with its checksum) nor the start of a GZIP or ZLIB stream (or the first record's "
                                "header is damaged)")
    # A compressed stream: its content must be TFRecord too.
    stream = zlib.decompressobj(31 if kind == "gzip" else 15)
    try:
        content = stream.decompress(head, HEADER_BYTES)
    except zlib.error:
        return Sniffed(kind)  # damaged: reading the file says where
    if not content and stream.eof:
        return Sniffed(kind)  # an empty stream: a file of no records
    if len(content) < HEADER_BYTES and not stream.eof:
        return Sniffed(kind)  # cut short, or more input needed: reading the file says
    if not is_record_header(content):
        begins = f" (it begins {_first_bytes(content, show)[2:-1]})" if show else ""
        return Sniffed("other", f"it is a {STREAM[kind]} stream whose content is not TFRecord{begins}")
    return Sniffed(kind)




HEAD_BYTES = 1024  # enough of a compressed stream to hold its first record header, compressed


def compressed_otherwise(head: bytes, compression: str | None) -> str | None:
    """How a file is stored when its first bytes prove it TFRecord compressed otherwise than ``compression``
    ('GZIP-compressed', 'not compressed', ...); None when they agree, or prove nothing (empty, damaged)."""
    if is_record_header(head):
        found = "tfrecord"
    else:
        found = None
        for kind, window in (("gzip", 31), ("zlib", 15)):
            try:
                content = zlib.decompressobj(window).decompress(head, HEADER_BYTES)
            except zlib.error:
                continue
            if is_record_header(content):
                found = kind
                break
        if found is None:
            return None
    return None if (found if found != "tfrecord" else None) == compression else Sniffed(found).describe()
