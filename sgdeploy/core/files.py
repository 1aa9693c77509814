"""Why a file the user named cannot be read: what the path is instead, and what to give.

`path_problem` answers before anything is read (a directory, a dangling symbolic link, a link
loop, a pipe, no such file); `decode_problem` after the bytes are in (UTF-16, binary data,
a byte that is not UTF-8, at its line and column).
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FileProblem:
    """What is wrong with a path or a file's bytes; `line` where one byte is to blame."""

    message: str
    hint: str
    line: int | None = None


def path_problem(path: str | Path, what: str, example: str = "",
                 pipe: str = "save it to a file first") -> FileProblem | None:
    """Why `path` is no `what` file (`what`: "profile", "log file", ...); None when it is one.
    `example`: a file name to suggest inside a directory given instead ("*.toml"); `pipe`: what
    to do with a pipe (`<(command)`) instead."""
    name = str(path)
    try:
        mode = os.stat(name).st_mode
    except OSError as exc:
        return _missing(name, what, exc)
    except ValueError:  # a NUL in the name: no file can have it
        return FileProblem(f"no such {what}: {name!r} (the name has a NUL character)",
                           "check the path")
    if stat.S_ISDIR(mode):
        inside = os.path.join(name, example or "FILE")
        return FileProblem(f"{name} is a directory, not a {what}",
                           f"name a {what} in it, e.g. {inside}")
    if stat.S_ISFIFO(mode):
        return FileProblem(f"{name} is a pipe, not a {what} on disk", pipe)
    if not stat.S_ISREG(mode):
        return FileProblem(f"{name} is a device or socket, not a {what}",
                           f"give the {what} itself")
    if not os.access(name, os.R_OK):
        return FileProblem(f"cannot read {name}: permission denied",
                           "check its permissions (ls -l), or run as its owner")
    return None


def _missing(name: str, what: str, exc: OSError) -> FileProblem:
    if exc.errno == errno.ELOOP:
        return FileProblem(f"{name} is a symbolic link that loops ({_chain(name)})",
                           "point the link at the real file (ls -l shows where each link goes)")
    if exc.errno == errno.ENOENT and os.path.islink(name):
        return FileProblem(f"{name} is a symbolic link to {os.readlink(name)}, which does not "
                           f"exist", f"point the link at the {what}, or give the {what} itself")
    if exc.errno == errno.ENOTDIR:
        return FileProblem(f"no such {what}: {name} (a folder on the way is a file)",
                           "check the path")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return FileProblem(f"cannot reach {name}: permission denied",
                           "check the folders' permissions")
    if exc.errno != errno.ENOENT:
        return FileProblem(f"cannot read {name}: {exc.strerror or exc}", "check the path")
    near = _near(name)
    return FileProblem(f"no such {what}: {name}" + (f"; did you mean {near}?" if near else ""),
                       "correct the path" if near else "check the path")


def _chain(name: str) -> str:
    """The first links of a loop, as `a -> b -> a`."""
    seen, current = [name], name
    while len(seen) < 6:
        try:
            target = os.readlink(current)
        except OSError:
            break
        current = os.path.join(os.path.dirname(current), target)
        seen.append(target)
        if os.path.normpath(current) == os.path.normpath(name):
            break
    return " -> ".join(seen)


def _near(name: str) -> str | None:
    """A file beside the one named whose name is close to it (a typo)."""
    folder, base = os.path.split(name)
    try:
        siblings = os.listdir(folder or ".")
    except OSError:
        return None
    match = difflib.get_close_matches(base, siblings, n=1, cutoff=0.75)
    return os.path.join(folder, match[0]) if match else None


def not_text(data: bytes) -> FileProblem | None:
    """UTF-16 text or binary data, where TOML wants UTF-8 text; None for anything else."""
    head = data[:80]
    fewer, more = sorted((head[0::2].count(0), head[1::2].count(0)))
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") or (fewer == 0 and more >= max(len(head) // 4, 2)):
        return FileProblem("the file is UTF-16 text; TOML files are UTF-8", "save it as UTF-8 "
                           "(in the editor, or: iconv -f UTF-16 -t UTF-8 OLD > NEW)")
    if b"\x00" in data[:8192]:
        return FileProblem("the file is binary data, not text",
                           "give the TOML file; is this the right path?")
    return None


def decode_problem(data: bytes, exc: UnicodeDecodeError) -> FileProblem:
    """Why bytes are not UTF-8 text, in words: UTF-16, binary, or one byte at its place."""
    found = not_text(data)
    if found is not None:
        return found
    before = data[: exc.start]
    line = before.count(b"\n") + 1
    column = exc.start - (before.rfind(b"\n") + 1) + 1
    return FileProblem(f"byte 0x{data[exc.start]:02X} at line {line}, column {column} is not UTF-8 "
                       "(the file looks Latin-1 or Windows-1252 encoded)", "save the file as UTF-8",
                       line)
