"""The profiler's records in a kernel cache file: signature (JSON) -> the winning choice (JSON)
and the table it was measured from, each with a checksum. A mixin of KernelCache (its lock,
queries, writes, trust and shipped files), as cache_maintenance is."""
from __future__ import annotations

import json
import time
import warnings

from . import cache_files


class Winners:
    """KernelCache's profiler-record methods."""

    def get_winner(self, signature: str) -> tuple[dict, list] | None:
        trusted = self.trusted()      # a foreign file's records are not ours either
        with self._lock:
            if signature in self._overlay_winners:
                return self._overlay_winners[signature]
            row = None if not trusted else self._query(lambda c: c.execute(
                "SELECT choice, table_json, checksum FROM winners WHERE signature = ?", (signature,)).fetchone()
                if cache_files.has_table(c, "winners") else None)
        if row is None:   # a fleet's shipped files carry its profiler records too
            return next((found for cache in self.shipped for found in [cache.get_winner(signature)] if found), None)
        choice, table, checksum = row
        if cache_files.checksum(choice.encode(), signature + table) != checksum:
            warnings.warn(f"profiler record for {signature[:60]} failed its checksum; ignored")
            return None
        return json.loads(choice), json.loads(table)

    def put_winner(self, signature: str, choice: dict, table: list) -> None:
        choice_json, table_json = json.dumps(choice, sort_keys=True), json.dumps(table)
        with self._lock:
            if not self._write(lambda c: c.execute(
                    "INSERT OR REPLACE INTO winners (signature, choice, table_json, checksum, created) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (signature, choice_json, table_json,
                     cache_files.checksum(choice_json.encode(), signature + table_json), time.time()))):
                self._overlay_winners[signature] = (json.loads(choice_json), json.loads(table_json))

    def winners(self) -> list[tuple[str, dict]]:
        """(signature, choice) of every profiler record get_winner serves: this file's (none
        from a foreign file), those kept in memory (a read-only or full cache), then each
        shipped file's, so a serving node finds its fleet's records."""
        with self._lock:
            found = [(sig, choice) for sig, (choice, _) in self._overlay_winners.items()]
        if self.trusted():
            found += [(sig, json.loads(choice)) for sig, choice, _ in self.records()]
        for cache in self.shipped:
            found += cache.winners()
        return found

    def records(self) -> list[tuple[str, str, str]]:
        """(signature, choice JSON, table JSON) of every intact profiler record in this file,
        whoever wrote it (for listing and merging; winners() and get_winner() serve)."""
        with self._lock:
            rows = self._query(lambda c: c.execute(
                "SELECT signature, choice, table_json, checksum FROM winners ORDER BY signature").fetchall()
                if cache_files.has_table(c, "winners") else [], [])
        intact = [(sig, choice, table) for sig, choice, table, checksum in rows
                  if cache_files.checksum(choice.encode(), sig + table) == checksum]
        if len(intact) < len(rows):
            warnings.warn(f"{self.path}: {len(rows) - len(intact)} profiler records failed their checksum; ignored")
        return intact
