"""Host-side file access inside a workspace that an adversary controls.

The env's view/create/edit tools and the reward's copy of hidden tests run on the host as root, on a
directory the agent could fill with symlinks. Every path here is walked one component at a time with
``O_NOFOLLOW``: a symlink anywhere on the way, ``..``, an absolute path outside the workspace or a
non-regular file is refused with a clear message instead of being followed off the workspace.
No sandboxed process runs between commands (each command's process tree is killed when it ends),
so nothing can swap a path between our check and our use.
"""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

SANDBOX_WORKSPACE = "/workspace"


class UnsafePathError(ValueError):
    """A path that points outside the workspace, through a symlink, or at a non-regular file."""


def split_rel(path: str, workspace_aliases: tuple[str, ...] = (SANDBOX_WORKSPACE,)) -> list[str]:
    """Normalise a user path ("a/b.py", "./a/b.py", "/workspace/a/b.py") to workspace-relative parts."""
    if not isinstance(path, str) or not path.strip():
        raise UnsafePathError("path must be a non-empty string relative to the workspace")
    if "\x00" in path:
        raise UnsafePathError("path contains a NUL byte")
    path = path.strip()
    if path.startswith("/"):
        for alias in workspace_aliases:
            alias = alias.rstrip("/")
            if path == alias or path.startswith(alias + "/"):
                path = path[len(alias):]
                break
        else:
            raise UnsafePathError(f"{path!r} is outside the workspace ({workspace_aliases[0]})")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UnsafePathError(f"{path!r}: '..' is not allowed; give a path inside the workspace")
    return parts


def _walk_dirs(root: str, parts: list[str], *, create: bool, uid: int | None) -> int:
    """Open the directory holding ``parts[-1]``, refusing symlinks; returns an fd (caller closes)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in parts[:-1]:
            try:
                nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise FileNotFoundError(f"no such directory: {'/'.join(parts[:-1])}") from None
                os.mkdir(name, 0o755, dir_fd=fd)
                if uid is not None:
                    os.chown(name, uid, uid, dir_fd=fd, follow_symlinks=False)
                nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as e:
                raise UnsafePathError(f"{'/'.join(parts)}: {name!r} is a symlink or not a directory "
                                      f"({e.strerror})") from None
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_file(root: str, path: str, max_bytes: int) -> tuple[bytes, int]:
    """Read up to ``max_bytes`` of a regular file in the workspace; returns (data, full size)."""
    parts = split_rel(path)
    if not parts:
        raise UnsafePathError(f"{path!r} is the workspace itself, not a file")
    dfd = _walk_dirs(root, parts, create=False, uid=None)
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file: {'/'.join(parts)}") from None
        except OSError as e:
            raise UnsafePathError(f"{'/'.join(parts)}: cannot open ({e.strerror}; symlinks are refused)") from None
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(f"{'/'.join(parts)} is a directory; use the shell tool to list it")
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePathError(f"{'/'.join(parts)} is not a regular file")
            data = os.read(fd, max_bytes)
            return data, st.st_size
        finally:
            os.close(fd)
    finally:
        os.close(dfd)


def write_file(root: str, path: str, data: bytes, *, uid: int | None, max_bytes: int,
               create_parents: bool = True, replace_any: bool = False) -> None:
    """Create or overwrite a regular file in the workspace (never through a symlink).

    ``replace_any`` removes whatever is at the path first (symlink, directory, fifo) — used when the
    reward lays hidden tests over an agent's workspace.
    """
    if len(data) > max_bytes:
        raise ValueError(f"file content is {len(data)} bytes; the limit is {max_bytes}")
    parts = split_rel(path)
    if not parts:
        raise UnsafePathError(f"{path!r} is the workspace itself, not a file")
    if replace_any:
        _clear_parents(root, parts, uid)
    dfd = _walk_dirs(root, parts, create=create_parents, uid=uid)
    try:
        if replace_any:
            _remove_entry(dfd, parts[-1])
        try:
            fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK,
                         0o644, dir_fd=dfd)
        except OSError as e:
            raise UnsafePathError(f"{'/'.join(parts)}: cannot write ({e.strerror}; symlinks are refused)") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UnsafePathError(f"{'/'.join(parts)} is not a regular file")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if uid is not None:
                os.fchown(fd, uid, uid)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)


def _clear_parents(root: str, parts: list[str], uid: int | None) -> None:
    """Replace any non-directory (symlink, file) standing where a parent directory must be."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in parts[:-1]:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    os.unlink(name, dir_fd=fd)
                    raise FileNotFoundError
            except FileNotFoundError:
                os.mkdir(name, 0o755, dir_fd=fd)
                if uid is not None:
                    os.chown(name, uid, uid, dir_fd=fd, follow_symlinks=False)
            nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)


def _remove_entry(dfd: int, name: str) -> None:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dfd)
    else:
        os.unlink(name, dir_fd=dfd)


def copy_tree(src: str | Path, dst: str | Path, *, uid: int | None, max_bytes: int) -> int:
    """Copy directories, regular files and symlinks (as links, never followed) from src into dst.

    Other file types (fifos, sockets, devices) are skipped; hard links become separate files. Returns
    the bytes copied; raises if the tree is larger than ``max_bytes``.
    """
    total = 0
    src, dst = str(src), str(dst)
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        rel = os.path.relpath(dirpath, src)
        target_dir = dst if rel == "." else os.path.join(dst, rel)
        if rel != ".":
            os.mkdir(target_dir, 0o755)
            if uid is not None:
                os.lchown(target_dir, uid, uid)
        for name in list(dirnames):
            if os.path.islink(os.path.join(dirpath, name)):  # os.walk lists dir symlinks as dirs
                dirnames.remove(name)
                filenames.append(name)
        for name in filenames:
            s, d = os.path.join(dirpath, name), os.path.join(target_dir, name)
            st = os.lstat(s)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(s), d)
            elif stat.S_ISREG(st.st_mode):
                total += st.st_size
                if total > max_bytes:
                    raise ValueError(f"{src} holds more than {max_bytes} bytes; raise sandbox disk_mb")
                fd = os.open(s, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                try:
                    with os.fdopen(os.open(d, os.O_WRONLY | os.O_CREAT | os.O_EXCL, st.st_mode & 0o755 | 0o600), "wb") as out:
                        while chunk := os.read(fd, 1 << 20):
                            out.write(chunk)
                finally:
                    os.close(fd)
            else:
                continue
            if uid is not None:
                os.lchown(d, uid, uid)
    return total
