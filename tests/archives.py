"""Tar archives no tar program writes: hand-made headers, for what a hostile resource holds."""

from __future__ import annotations

import io
import tarfile


def raw_header(name: str, size: int, kind: bytes, *, field: bytes | None = None) -> bytes:
    """One 512-byte tar header as GNU tar writes it, its checksum right.

    ``field`` replaces the octal size field, to write one no tar program would.
    """
    header = bytearray(512)
    header[0:100] = name.encode().ljust(100, b"\0")
    header[100:108] = b"0000644\0"
    header[108:116] = header[116:124] = b"0000000\0"
    header[124:136] = (field or f"{size:011o}".encode()).ljust(12, b"\0")
    header[136:148] = b"00000000000\0"
    header[156:157] = kind
    header[257:265] = b"ustar  \0"
    header[148:156] = b" " * 8
    header[148:156] = f"{sum(header):06o}\0 ".encode()
    return bytes(header)


def long_names(count: int) -> bytes:
    """``count`` GNU long-name headers in a row, each naming the next (511 bytes of "a")."""
    name = b"a" * 511 + b"\0"
    return (raw_header("././@LongLink", len(name), b"L") + name) * count


def tar_bytes(data: bytes) -> bytes:
    """An uncompressed tar holding ``garm``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("garm")
        info.size, info.mode = len(data), 0o755
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
