"""Which files and directories the kernel cache may trust, and private per-user directories.

A cubin runs on the GPU with the user's rights, so the cache file, its directory and
anything a symbolic link leads to must be owned by the user (or root) and writable by
nobody else. Standard library only; imports nothing from the package, so every floor
(env, build) may use it.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


class UnsafeCacheError(PermissionError):
    """A cache location others could have written: refused, never used."""


class UntrustedPathError(UnsafeCacheError):
    """A named path breaks a named rule; the message says how to fix it."""

    def __init__(self, path: Path, rule: str, fix: str, used_for: Path | None = None):
        self.path, self.rule, self.fix = Path(path), rule, fix
        subject = f"refusing to use {used_for}: " if used_for is not None and Path(used_for) != Path(path) else \
            "refusing to use "
        super().__init__(f"{subject}{path} {rule}; {fix}")


def current_uid() -> int:
    """The user whose files we trust (tests may monkeypatch it)."""
    return os.geteuid()


def _owner_uid(st: os.stat_result) -> int:
    """The owner of a stat result (tests may monkeypatch it to fake another owner)."""
    return st.st_uid


def _trusted_owner(st: os.stat_result) -> bool:
    # root may replace any file the user runs anyway, so a root-owned file (a cache shipped
    # read-only in an image) is as trustworthy as one of the user's own.
    return _owner_uid(st) in (current_uid(), 0)


_ELSEWHERE = "or set CUTLASS_SPARSE_CACHE to a file in a directory only you can write"


def check_owned_private(path: Path, used_for: Path | None = None, kind: str = "file") -> None:
    """Refuse path (following links) unless owned by us or root and not group/other writable."""
    st = os.stat(path)
    if not _trusted_owner(st):
        raise UntrustedPathError(
            path, f"is owned by uid {_owner_uid(st)}, not by you (uid {current_uid()}): its {kind} "
                  "could hold kernels someone else chose",
            f"use a {kind} you own (chown {current_uid()} {path}) {_ELSEWHERE}", used_for)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        # A shared directory such as /tmp (sticky, or not ours) is not to be chmod-ed: move.
        shared = st.st_mode & stat.S_ISVTX or _owner_uid(st) != current_uid()
        fix = "set CUTLASS_SPARSE_CACHE to a file in a directory only you can write (e.g. " \
              "~/.cache/cutlass_sparse/compiled_cache.db)" if shared else f"run 'chmod go-w {path}' {_ELSEWHERE}"
        raise UntrustedPathError(
            path, f"is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}: its group or "
                  "others may write it)", fix, used_for)


_MAX_LINKS = 40   # as the kernel's own limit on links followed in one lookup (ELOOP)


def check_path_chain(path: Path) -> None:
    """Walk path as the kernel resolves it and refuse what another user could redirect: a
    directory on the way that others may write (unless sticky, as /tmp, and the entry in it
    is ours or root's), or a symbolic link someone else owns. Whoever controls an ancestor
    can swap what lies below it, so checking the last directory alone is not enough. Stops
    at the first component that does not exist yet, once the directory it would be made in
    has passed (we make the rest)."""
    path = Path(path)
    if not path.is_absolute():   # '..' kept, not collapsed: after a link it means the target's parent
        path = Path(os.getcwd(), path)
    todo, current, links = list(path.parts[1:]), Path(path.anchor), 0
    while todo:
        name = todo.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            current = current.parent
            continue
        entry = current / name
        try:
            st = os.lstat(entry)
        except FileNotFoundError:   # we make the rest: where we make it must be safe too
            _check_holder(entry, None, path)
            return
        except OSError as exc:   # a path through a file, an unreadable directory
            raise UntrustedPathError(entry, f"cannot be examined ({exc.strerror or exc})",
                                     f"choose another path {_ELSEWHERE}", path) from None
        _check_holder(entry, st, path)
        if not stat.S_ISLNK(st.st_mode):
            current = entry
            continue
        if not _trusted_owner(st):
            raise UntrustedPathError(
                entry, f"is a symbolic link owned by uid {_owner_uid(st)}, not by you (uid {current_uid()}) "
                       "or root: it could lead anywhere its owner likes", f"remove it {_ELSEWHERE}", path)
        links += 1
        if links > _MAX_LINKS:
            raise UntrustedPathError(entry, "leads through too many symbolic links", f"remove the loop {_ELSEWHERE}",
                                     path)
        target = Path(os.readlink(entry))
        if target.is_absolute():
            current = Path(target.anchor)
        todo = [*target.parts[1 if target.is_absolute() else 0:], *todo]


def _check_holder(entry: Path, st: os.stat_result | None, path: Path) -> None:
    """The directory holding an entry on the way (st None: one we are about to make) must be
    ours or root's and writable by no one else, or sticky (/tmp: others may add entries but
    not move ours or root's) with the entry ours or root's."""
    holder = os.stat(entry.parent)
    if not (holder.st_mode & stat.S_ISVTX and _trusted_owner(holder)):
        check_owned_private(entry.parent, path, "directory")   # its owner, or anyone who may write it, could swap entry
    elif st is not None and not _trusted_owner(st):
        raise UntrustedPathError(
            entry, f"is owned by uid {_owner_uid(st)}, not by you (uid {current_uid()}), in the shared "
                   f"directory {entry.parent}: its owner chose what it holds", f"remove it {_ELSEWHERE}", path)


def check_cache_location(path: Path) -> Path:
    """Check the directories and links on the way to a cache file (check_path_chain), the
    file (if it exists), its directory, and where symbolic links lead; returns the real
    path to open. Raises UntrustedPathError."""
    path = Path(path)
    check_path_chain(path)
    real = Path(os.path.realpath(path))
    dirs = dict.fromkeys([path.parent, real.parent])      # where the link lives, where it leads
    for directory in dirs:
        if directory.exists():
            check_owned_private(directory, path, "directory")
    # a hot -journal is rolled back into the file on open: held to the same rule
    for candidate in (real, Path(f"{real}-wal"), Path(f"{real}-shm"), Path(f"{real}-journal")):
        try:
            check_owned_private(candidate, path, "file")
        except FileNotFoundError:   # absent, or gone since: another process's journal comes and goes
            pass
        except OSError as exc:   # a link loop, a path through a file: nothing SQLite should open
            raise UntrustedPathError(candidate, f"cannot be examined ({exc.strerror or exc})",
                                     f"remove it (rm {candidate}) {_ELSEWHERE}", path) from None
    return real


def private_dir(path: Path) -> Path:
    """Create (mode 0700) or accept a directory only we own and write; never a symbolic link."""
    path = Path(path)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UntrustedPathError(path, "is not a directory of its own (a symbolic link or a file someone "
                                       "may have planted)", f"remove it (rm {path}) and run again")
    if _owner_uid(st) != current_uid():
        raise UntrustedPathError(path, f"is owned by uid {_owner_uid(st)}, not by you (uid {current_uid()})",
                                 "remove it or set TMPDIR to a directory of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UntrustedPathError(path, f"is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})",
                                 f"run 'chmod 700 {path}'")
    return path


def user_temp_dir() -> Path:
    """$TMPDIR/cutlass_sparse-<uid>: created 0700 and checked."""
    return private_dir(Path(tempfile.gettempdir()) / f"cutlass_sparse-{current_uid()}")


def write_new_file(directory: Path, name: str, data: bytes) -> Path:
    """Write directory/name without following a link planted at that name: a fresh file
    (O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600) renamed over it."""
    target = Path(directory) / name
    temp = Path(directory) / f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, target)     # a rename replaces a link at target, never writes through it
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return target


def make_cache_dir(directory: Path) -> None:
    """mkdir -p, each level made 0700, or an error naming the directory and CUTLASS_SPARSE_CACHE;
    nothing is made where another user could have redirected the way (check_path_chain)."""
    check_path_chain(directory)
    missing = [level for level in (Path(directory), *Path(directory).parents) if not level.exists()]
    try:
        for level in reversed(missing):   # each level 0700 (mkdir -p would give the parents the umask's mode)
            try:
                os.mkdir(level, 0o700)
            except FileExistsError:   # made meanwhile by another process
                pass
    except OSError as exc:
        raise PermissionError(
            f"cannot create the kernel cache directory {directory} ({exc.strerror or exc}); set "
            "CUTLASS_SPARSE_CACHE to a file in a directory you can write, or CUTLASS_SPARSE_CACHE_READONLY=1 "
            "to use an existing cache without writing") from exc


def file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at path now, None if there is none."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino
