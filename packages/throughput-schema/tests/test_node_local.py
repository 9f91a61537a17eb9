"""A record the campaign's filesystem refuses is kept on the node, at the campaign path mirrored."""

from __future__ import annotations

import errno

import pytest

from throughput_schema.node_local import NODE_LOCAL_FOLDER, ResultNotWritten, kept_path, not_written

RECORD = b'{"outcome": {"kind": "ok"}}'


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_or_quota_keeps_the_record_on_the_node(tmp_path, monkeypatch, code):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "node"))
    path = tmp_path / "campaign" / "result.json"
    refused = OSError(code, "refused", str(path) + ".tmp")
    found = not_written(refused, path, RECORD)
    assert isinstance(found, ResultNotWritten)
    assert found.kept == tmp_path / "node" / NODE_LOCAL_FOLDER / str(path).lstrip("/") == kept_path(path)
    assert found.kept.read_bytes() == RECORD
    said = str(found)
    assert said.startswith(f"cannot write {path}: refused ({errno.errorcode[code]}): its filesystem is full"), said
    assert said.endswith(f"a copy is kept on this node at {found.kept}"), said
    assert not path.exists()


def test_a_node_without_space_either_says_so(tmp_path, monkeypatch):
    (tmp_path / "node").write_text("a file where the folder should be")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "node"))
    found = not_written(OSError(errno.ENOSPC, "full"), tmp_path / "result.json", RECORD)
    assert found.kept is None and str(found).endswith("no copy could be kept on this node")


def test_any_other_error_is_raised_as_it_is(tmp_path):
    denied = PermissionError(errno.EACCES, "denied")
    with pytest.raises(PermissionError):
        not_written(denied, tmp_path / "result.json", RECORD)
