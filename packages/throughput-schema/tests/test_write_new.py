"""`write_new`: a derived record is published only where no file is, and never over one."""

from __future__ import annotations

import os

from throughput_schema import write_new


def test_publishes_where_nothing_is_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "result.json"
    assert write_new(path, b'{"derived": true}')
    assert path.read_bytes() == b'{"derived": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_never_replaces_a_file_that_is_there(tmp_path):
    path = tmp_path / "result.json"
    path.write_bytes(b'{"the worker": "measured"}')
    assert not write_new(path, b'{"derived": true}')
    assert path.read_bytes() == b'{"the worker": "measured"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_a_retried_link_that_succeeded_counts_as_published(tmp_path, monkeypatch):
    """NFS may resend a LINK whose reply was lost: the server did it, the retry says EEXIST."""
    real_link = os.link

    def link_then_eexist(src, dst, *args, **kwargs):
        real_link(src, dst, *args, **kwargs)
        raise FileExistsError(17, "File exists", str(dst))

    monkeypatch.setattr(os, "link", link_then_eexist)
    path = tmp_path / "result.json"
    assert write_new(path, "derived")
    assert path.read_text() == "derived"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]
