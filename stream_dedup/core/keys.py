"""Fixed-width, bytewise-sortable encodings for state-store keys.

(ts, id) is the order of documents everywhere; encoding ts as big-endian unsigned (offset by
2^63 so that negative times sort first) followed by the id makes RocksDB's key order equal to
that order, so "the earliest entry of a bucket" is the first key under its prefix.
"""
from __future__ import annotations

import struct

_TS = struct.Struct(">Q")
_U64 = struct.Struct(">Q")
_OFFSET = 1 << 63


def enc_ts(ts: int) -> bytes:
    return _TS.pack(ts + _OFFSET)


def dec_ts(b: bytes, at: int = 0) -> int:
    return _TS.unpack_from(b, at)[0] - _OFFSET


def enc_u64(v: int) -> bytes:
    return _U64.pack(v)


def dec_u64(b: bytes, at: int = 0) -> int:
    return _U64.unpack_from(b, at)[0]


def enc_order(ts: int, ident: str) -> bytes:
    return enc_ts(ts) + ident.encode("utf-8", "surrogatepass")


def dec_order(b: bytes, at: int = 0) -> tuple[int, str]:
    return dec_ts(b, at), b[at + 8:].decode("utf-8", "surrogatepass")
