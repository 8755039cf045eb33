"""The kernel cache's maintenance commands (`cutlass-sparse cache ...`, warm-up merges):
listing (ptxas's notes too), verifying, clearing, merging and compacting a file. Kept apart
from what a call needs (opening, get and put: build.cache.KernelCache, which these are
methods of)."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

from . import cache_files


class Maintenance:
    """KernelCache's maintenance methods (they use its lock, connection and queries)."""

    def rows(self):
        """(key, name, arch, stored bytes, intact: checksum holds and it unpacks) for every entry."""
        with self._lock:
            return self._query(lambda c: [
                (key, name, arch, len(cubin), cache_files.intact(cubin, meta, checksum) is not None)
                for key, name, arch, cubin, meta, checksum in c.execute(
                    "SELECT key, name, arch, cubin, meta, checksum FROM kernels ORDER BY name, arch")], [])

    def performance_notes(self) -> list[tuple[str, str, list[str]]]:
        """(name, arch, notes) of each kernel whose compile drew ptxas performance notes
        (kernels.py keeps them in the entry's meta)."""
        with self._lock:
            rows = self._query(lambda c: c.execute("SELECT name, arch, meta FROM kernels").fetchall(), [])
        return [(name, arch, notes) for name, arch, meta in rows if (notes := _notes(meta))]

    def keys(self) -> list[str]:
        return [row[0] for row in self.rows()]

    def verify(self) -> list[str]:
        """Drop entries whose checksum fails or that do not unpack; return their keys."""
        bad = [key for key, _, _, _, ok in self.rows() if not ok]
        if bad and not self.read_only:
            with self._lock:
                self._query(lambda c: c.executemany("DELETE FROM kernels WHERE key = ?", [(k,) for k in bad]))
        return bad

    def clear(self) -> int:
        """Remove every kernel and profiler record; returns how many kernels. A damaged file
        is set aside and a fresh one started, so clearing always succeeds."""
        self._require_writable("clear")
        with self._lock:
            return self._query(lambda c: (c.execute("DELETE FROM winners"),
                                          c.execute("DELETE FROM kernels").rowcount)[1], 0)

    @classmethod
    def merge_source(cls, other: Path | str):
        """`other` opened read-only to merge from, or an error: no such file, or not a readable
        cache (a half-copied shard, another program's file: never a silent success)."""
        if not Path(other).is_file():
            raise FileNotFoundError(f"cannot merge kernel cache {other}: no such file")
        source = cls(other, read_only=True)
        if not source.readable:
            source.close()
            raise RuntimeError(f"cannot merge kernel cache {other}: it is not a readable cache file")
        return source

    def merge_from(self, other: Path | str) -> int:
        """Copy every intact entry of another cache file that this one lacks; returns how many."""
        self._require_writable("merge into")
        source = self.merge_source(other)
        with source._lock:
            rows = source._query(lambda c: c.execute(
                "SELECT key, name, arch, cubin, meta, checksum, created FROM kernels").fetchall(), [])
        winners = source.records()
        toolchains = source.toolchains()
        cache_files.foreign_to_us(source, "they are copied, but this version will not serve them")
        source.close()
        intact = []
        for row in rows:
            if cache_files.intact(row[3], row[4], row[5]) is None:
                warnings.warn(f"{other}: entry {row[1]} ({row[0][:12]}) failed its checksum or does not unpack; "
                              f"not merged")
            else:
                intact.append(row)
        with self._lock:
            return self._query(lambda c: cache_files.insert_missing(c, intact, winners, toolchains), 0)

    def _require_writable(self, what: str) -> None:
        if self.read_only or self._conn is None:
            raise PermissionError(f"cannot {what} read-only kernel cache {self.path}")

    def compact(self) -> None:
        """Fold the journal into the file and drop free pages (before shipping it)."""
        self._require_writable("compact")
        with self._lock:
            self._query(lambda c: c.execute("VACUUM"))


def _notes(meta_json: str) -> list[str]:
    """An entry's ptxas notes; none where its meta does not parse (`cache verify` reports it)."""
    try:
        return json.loads(meta_json).get("ptxas_notes") or []
    except (ValueError, AttributeError):
        return []
