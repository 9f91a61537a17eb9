"""The one SHA-256 helper: a file read in chunks hashes as its bytes do, and text as its UTF-8."""

from __future__ import annotations

import hashlib

from throughput_schema.digests import sha256_bytes, sha256_file


def test_file_in_chunks_equals_its_bytes(tmp_path):
    data = bytes(range(256)) * 9000  # over one 1 MiB chunk, so the chunked loop runs twice
    path = tmp_path / "frozen.bin"
    path.write_bytes(data)
    assert sha256_file(path) == sha256_bytes(data) == hashlib.sha256(data).hexdigest()


def test_text_hashes_as_utf8():
    text = "B·L tokens\n"
    assert sha256_bytes(text) == hashlib.sha256(text.encode("utf-8")).hexdigest()
