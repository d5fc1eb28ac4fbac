"""Object storage (``s3://bucket/prefix``) through pyarrow's S3 file system, which ``view`` already
depends on (no second S3 stack; decision 0048).  pyarrow is imported on first use, so a local run
never loads the AWS SDK.

Credentials come from the usual AWS sources (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
profiles, instance roles); the endpoint is passed in by the caller (``--endpoint-url`` or
``AWS_ENDPOINT_URL``, resolved in ``contracts.env``).  Everything here moves whole objects between
object storage and a local directory: the readers keep reading local, memory-mapped files.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

SCHEME = "s3://"
# bucket naming rules (3-63 of lowercase letters, digits, dots, hyphens); keys: anything but NUL
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")


class StorageError(Exception):
    """A URL that cannot name a location, or an object store that cannot be reached or read."""


def is_url(path: str | None) -> bool:
    """True for an object-storage URL (``s3://...``); local paths and ``-`` are not."""
    return bool(path) and str(path).startswith(SCHEME)


@dataclass(frozen=True)
class Location:
    """A bucket and a key prefix (no leading or trailing '/'; "" is the whole bucket)."""

    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}".rstrip("/")

    @property
    def path(self) -> str:
        """The name pyarrow's file system uses (bucket/prefix)."""
        return f"{self.bucket}/{self.prefix}".rstrip("/")

    def child(self, rel: str) -> "Location":
        return Location(self.bucket, f"{self.prefix}/{rel}".strip("/") if self.prefix else rel.strip("/"))


def parse(url: str) -> Location:
    """``s3://bucket/prefix`` as a Location; raises StorageError naming what is wrong."""
    from neuron_explorer.util.names import printable

    shown = printable(url)
    if not is_url(url):
        raise StorageError(f"{shown}: not an s3:// URL")
    rest = url[len(SCHEME):]
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket):
        raise StorageError(f"{shown}: {bucket!r} is not a valid bucket name "
                           "(3-63 lowercase letters, digits, '.' or '-')")
    prefix = prefix.strip("/")
    parts = prefix.split("/") if prefix else []
    if any(p in ("", ".", "..") for p in parts):
        raise StorageError(f"{shown}: the key prefix has an empty, '.' or '..' component")
    if "\0" in prefix:
        raise StorageError(f"{shown}: the key prefix has a component with a NUL byte")
    return Location(bucket, prefix)


def filesystem(endpoint: str | None = None) -> Any:
    """A pyarrow S3FileSystem for ``endpoint`` (None: AWS); the region from AWS_REGION or
    AWS_DEFAULT_REGION (us-east-1 when unset, which a custom endpoint usually ignores)."""
    try:
        from pyarrow import fs as pafs
    except ImportError as e:  # pragma: no cover - pyarrow is a dependency
        raise StorageError(f"s3:// needs pyarrow with S3 support: {e}") from None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    kw: dict[str, Any] = {"region": region}
    if endpoint:
        scheme, sep, host = endpoint.partition("://")
        kw["endpoint_override"] = host if sep else endpoint
        kw["scheme"] = scheme if sep else "https"
    try:
        return pafs.S3FileSystem(**kw)
    except Exception as e:
        raise StorageError(f"cannot use S3 at {endpoint or 'AWS'}: {e}") from None


def _reason(e: Exception) -> str:
    """One line of an Arrow/AWS error (their messages span lines)."""
    return " ".join(str(e).split())[:300]


def list_files(fs: Any, loc: Location) -> list[tuple[str, int]]:
    """(key relative to ``loc``, size) of every object under ``loc``, sorted; [] when none."""
    from pyarrow import fs as pafs

    try:
        infos = fs.get_file_info(pafs.FileSelector(loc.path, recursive=True, allow_not_found=True))
    except Exception as e:
        raise StorageError(f"{loc.url}: cannot list: {_reason(e)}") from None
    base = loc.path + "/"
    out = [(i.path[len(base):], int(i.size or 0)) for i in infos
           if i.type == pafs.FileType.File and i.path.startswith(base)]
    return sorted(out)


def _copy(src: Any, dst: Any) -> None:
    while True:
        b = src.read(8 << 20)
        if not b:
            return
        dst.write(b)


def download(fs: Any, loc: Location, rels: list[str], dest: str) -> None:
    """Copy the objects ``loc/rel`` to ``dest/rel`` (directories created as needed).  A local
    failure stays an OSError; a failure of the store is a StorageError."""
    for rel in rels:
        local = os.path.join(dest, *rel.split("/"))
        os.makedirs(os.path.dirname(local), exist_ok=True)
        with open(local, "wb") as f:
            try:
                src = fs.open_input_stream(loc.child(rel).path)
            except OSError as e:
                raise StorageError(f"{loc.child(rel).url}: cannot read: {_reason(e)}") from None
            with src:
                _copy(src, f)


def upload(fs: Any, local: str, loc: Location) -> None:
    """Copy the local file ``local`` to the object ``loc`` (replacing it)."""
    with open(local, "rb") as src:
        try:
            with fs.open_output_stream(loc.path) as dst:
                _copy(src, dst)
        except OSError as e:
            raise StorageError(f"{loc.url}: cannot write: {_reason(e)}") from None


def put_bytes(fs: Any, loc: Location, data: bytes) -> None:
    try:
        with fs.open_output_stream(loc.path) as dst:
            dst.write(data)
    except OSError as e:
        raise StorageError(f"{loc.url}: cannot write: {_reason(e)}") from None


def delete(fs: Any, loc: Location) -> None:
    """Remove one object (missing is fine)."""
    try:
        fs.delete_file(loc.path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise StorageError(f"{loc.url}: cannot delete: {_reason(e)}") from None


def upload_tree(fs: Any, local_dir: str, loc: Location, skip: tuple[str, ...] = ()) -> list[str]:
    """Upload every file under ``local_dir`` to ``loc`` keeping relative paths, but the relative
    names in ``skip`` (a caller writes those itself, e.g. a marker that must come last).  Returns
    the relative keys written."""
    rels = []
    for d, _dirs, files in os.walk(local_dir):
        for f in files:
            rels.append(os.path.relpath(os.path.join(d, f), local_dir).replace(os.sep, "/"))
    rels = sorted(r for r in rels if r not in skip)
    for rel in rels:
        upload(fs, os.path.join(local_dir, *rel.split("/")), loc.child(rel))
    return rels


def bucket_exists(fs: Any, bucket: str) -> bool:
    from pyarrow import fs as pafs

    try:
        return fs.get_file_info(bucket).type != pafs.FileType.NotFound
    except OSError:
        return False
