"""SHA-256 hex digests, the one form every manifest, intent and input list records."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_bytes(data: bytes | str) -> str:
    """The digest of `data`; text is hashed as its UTF-8 bytes."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def sha256_file(path: Path) -> str:
    """The digest of a file's bytes, read in chunks so a large frozen file is never held whole."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
