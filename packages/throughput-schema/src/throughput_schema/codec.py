"""Strict decoding, canonical encoding and atomic writes of records.

A `SchemaError` carries one line that names the file and the field, which the
command lines print as-is: no traceback reaches a user for a bad file.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from throughput_schema.records import unknown_field
from throughput_schema.version import SCHEMA_VERSION, UPGRADE_FILLS

# The file that makes a folder a campaign (`layout.MANIFEST` is this name): declared here, as
# a reader's refusal of another version names the campaign to upgrade, and the layout reads
# its records through this module.
CAMPAIGN_MANIFEST = "manifest.json"

T = TypeVar("T")
S = TypeVar("S", bound=msgspec.Struct)  # user input converts only to records, whose fields name the typos

_encoder = msgspec.json.Encoder(order="deterministic")
_decoders: dict[Any, msgspec.json.Decoder] = {}


class SchemaError(ValueError):
    """A record that is malformed, truncated, or of another schema version."""


def dumps(record: Any) -> bytes:
    """Pretty, deterministic JSON with a trailing newline (diff-friendly files)."""
    return msgspec.json.format(_encoder.encode(record), indent=2) + b"\n"


def decode(data: bytes | str, type_: type[T], *, source: str = "input") -> T:
    """Decode `data` as `type_`, naming `source` and the offending field on failure."""
    # Checked first: msgspec skips the fields a record does not know without reading them.
    why = not_text(data)
    if why:
        raise SchemaError(f"{source}: {why}")
    decoder = _decoders.get(type_)
    if decoder is None:
        decoder = _decoders[type_] = msgspec.json.Decoder(type_)
    try:
        record = decoder.decode(data)
    except msgspec.ValidationError as exc:
        version = _peek_version(data)
        if version is not None and version != SCHEMA_VERSION:
            raise SchemaError(_other_version(source, version)) from None
        missing = re.search(r"missing required field `(\w+)`", str(exc))
        if missing and missing.group(1) in UPGRADE_FILLS:
            raise SchemaError(f"{source}: {exc}, written by older tools; {upgrade_hint(source)}") from None
        raise SchemaError(f"{source}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise SchemaError(f"{source}: not valid JSON ({exc}); the file may be truncated or corrupted") from None
    version = getattr(record, "schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise SchemaError(_other_version(source, version))
    return record


def convert_input(raw: dict[str, Any], type_: type[S], *, strict: bool = True) -> S:
    """What a user wrote (a parsed YAML preset or profile) as `type_`. Unlike records read
    back from files, a field `type_` does not know is a typo here: a SchemaError naming it."""
    typo = unknown_field(raw, type_)
    if typo:
        raise SchemaError(typo)
    try:
        return msgspec.convert(raw, type_, strict=strict)
    except msgspec.ValidationError as exc:
        raise SchemaError(str(exc)) from None


def read(path: str | os.PathLike[str], type_: type[T]) -> T:
    """Read and decode one record file; a missing or unreadable file is a SchemaError too."""
    return decode(read_bytes(path), type_, source=str(path))


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """A file's bytes; a missing or unreadable file is a one-line SchemaError naming it."""
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise SchemaError(f"{path}: file not found") from None
    except OSError as exc:
        raise SchemaError(f"{path}: cannot read ({exc.strerror})") from None


def not_text(data: bytes | str) -> str | None:
    """Why `data` is not UTF-8 text (a binary or otherwise encoded file), or None if it is."""
    if isinstance(data, str):
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data":
            return None  # a multi-byte character cut off: a truncated text file, said as such
        return (
            f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); a binary or otherwise encoded file"
        )
    return None


def read_yaml(path: str | os.PathLike[str]) -> Any:
    """The one reader of the YAML files a person writes (recipes, cluster profiles).

    A missing file raises FileNotFoundError, which each caller words for its own option;
    an unreadable, binary, non-UTF-8 or malformed file is a one-line SchemaError.
    """
    import yaml  # only the YAML readers need it: importing the records stays cheap

    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise SchemaError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SchemaError(
            f"{path}: {not_text(data) or 'not UTF-8 text: it ends inside a character (truncated?)'}"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "malformed YAML"
        raise SchemaError(f"{path}: malformed YAML{where}: {problem}") from None


def _payload(data: bytes | str | Any) -> bytes:
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    return dumps(data)


def _written_beside(path: Path, data: bytes | str | Any, mode: int, suffix: str) -> str:
    """`data` in a temporary file in `path`'s folder, flushed to disk; its name. A failed
    write removes it and names `path` (a write or fsync names no file of its own)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(_payload(data))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
    except BaseException as exc:
        _remove(tmp)
        if isinstance(exc, OSError) and exc.filename is None:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    return tmp


def _remove(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass


def write_atomic(path: str | os.PathLike[str], data: bytes | str | Any, *, mode: int = 0o644) -> Path:
    """Write `data` (bytes, text, or a record) so that readers see old or new, never half.

    Temp file in the same folder, fsync, rename, fsync the folder: a crash at any
    instant leaves either the previous file or the complete new one.
    """
    path = Path(path)
    tmp = _written_beside(path, data, mode, ".tmp")
    try:
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise
    fsync_dir(path.parent)
    return path


def write_new(path: str | os.PathLike[str], data: bytes | str | Any, *, mode: int = 0o644) -> bool:
    """Publish `data` at `path` only where no file is there, atomically: True when this call
    published it, False when a file was there (which stays as it is).

    For a record derived from a file that is missing here but may exist already on another
    machine (a shared filesystem shows files late): a rename would replace that file on the
    server, a hard link fails where the name exists there. NFS may retry a link that succeeded
    and report EEXIST for it, so the file found is compared with ours by its inode.
    """
    path = Path(path)
    tmp = _written_beside(path, data, mode, ".new")
    try:
        ours = os.stat(tmp).st_ino
        try:
            os.link(tmp, path)
        except FileExistsError:
            try:
                published = os.stat(path).st_ino == ours
            except FileNotFoundError:
                published = False
            if not published:
                return False
    finally:
        _remove(tmp)
    fsync_dir(path.parent)
    return True


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _peek_version(data: bytes | str) -> int | None:
    try:
        obj = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return None
    version = obj.get("schema_version") if isinstance(obj, dict) else None
    return version if isinstance(version, int) else None


def _other_version(source: str, version: int) -> str:
    if version > SCHEMA_VERSION:
        return (
            f"{source}: written with schema version {version}, newer than this tool's {SCHEMA_VERSION}; "
            "upgrade the tools to read it"
        )
    return f"{source}: written with schema version {version}, older than this tool's {SCHEMA_VERSION}; " + upgrade_hint(
        source
    )


def upgrade_hint(source: str) -> str:
    """What a reader tells the user of a file older tools wrote: the one command that
    rewrites its campaign in today's format."""
    return f"rewrite its campaign once with `throughput-schema upgrade {_campaign_of(source)}`"


def _campaign_of(source: str) -> str:
    """The campaign folder holding the file `source` names (the nearest with a manifest.json),
    else the file's own folder."""
    path = Path(source).absolute()
    for folder in path.parents:
        if (folder / CAMPAIGN_MANIFEST).is_file():
            return str(folder)
    return str(path.parent)
