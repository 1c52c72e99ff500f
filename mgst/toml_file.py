"""Read a TOML file a user wrote (experiment, sweep, lab hosts, allow-list), bounded, with one plain sentence for
whatever is wrong.

tomllib's cost is not bounded by a file's size alone: a dotted key of n parts costs memory quadratic in n (a
40 KB key took 1.6 GB), and arrays or inline tables nested some hundreds deep exhaust its recursion. So the text,
read within MAX_TOML_BYTES, is first scanned (strings and comments skipped, as TOML reads them) for its nesting and
its keys, and refused past MAX_NESTING, MAX_KEY_PARTS, MAX_KEY_LENGTH or MAX_KEY_DOTS before tomllib sees it.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

from mgst.bounded_read import FileReadError, read_bytes, size_text

MAX_TOML_BYTES = 4 << 20  # 4 MiB; an experiment file is some 3 KB, a hosts file of a lab room some 20 KB
MAX_NESTING = 32  # arrays and inline tables within one another (a rates matrix is 2)
MAX_KEY_PARTS = 32  # the parts of one dotted key or table header: [hosts.pc01] is 2
MAX_KEY_LENGTH = 1024  # characters of one key, its quoted parts included
MAX_KEY_DOTS = 100_000  # the dots of every key of the file together: each can make a table

# One token of TOML's lexical grammar, as the scan needs it: the four kinds of string (multi-line first: a closing
# delimiter may be followed by up to two more quotes, which belong to the string), a comment, a line break, one of
# the characters that open, close or separate, blanks, and a run of anything else (bare keys, numbers, dates).
# A basic string's body is runs of plain characters and escapes, repeated possessively: a plain repeat keeps a
# backtracking point per character or escape, some 145 bytes, and a 4 MB string took 570 MB. A body's pieces are told
# apart by their first character, so there is never anything to undo.
_TOKEN = re.compile(r'''
    (?P<string> """(?:[^\\"]++|\\[\s\S]|"(?!""))*+"""{1,3}
              | '\'\'[\s\S]*?\'\'\'{1,3}
              | "(?:[^"\\\n]++|\\.)*+"
              | '[^'\n]*' )
  | (?P<comment> \#[^\n]* )
  | (?P<newline> \n )
  | (?P<punct> [\[\]{}=,.] )
  | (?P<blank> [ \t\r]+ )
  | (?P<other> [^"'\#\n\[\]{}=,. \t\r]+ | ["'] )
''', re.VERBOSE)


class TomlFileError(ValueError):
    """The file cannot be read or is not TOML; the message says which, in words for the user."""


def read_toml(path: str | os.PathLike) -> dict[str, Any]:
    """The file's table; TomlFileError: "no such file", "cannot read: ...", "larger than 4 MiB", a limit of the
    scan passed ("... nested deeper than 32 [line L]") or "TOML syntax error: ... [line L, column C]" (tomllib names
    the line itself, except at the end of the document, where this adds it)."""
    p = Path(path)
    try:
        text = read_bytes(p, MAX_TOML_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise TomlFileError("no such file") from None
    except FileReadError as err:
        raise TomlFileError(f"cannot read: {err}" if err.line is None else str(err)) from None
    except UnicodeDecodeError as err:
        raise TomlFileError(f"not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}): a TOML file "
                            "is UTF-8 text") from None
    except OSError as err:
        raise TomlFileError(f"cannot read: {err}") from None
    if text.startswith("\ufeff"):  # (a text editor's choice on some systems: tomllib reads it as a bad statement)
        raise TomlFileError("the file begins with a byte-order mark (U+FEFF), which TOML does not allow: save it as "
                            "UTF-8 without one")
    check_toml_shape(text)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        message = str(err)
        if "line" not in message:  # "(at end of document)": say where that is
            lines = text.split("\n")
            message = f"{message} [line {len(lines)}, column {len(lines[-1]) + 1}]"
        raise TomlFileError(f"TOML syntax error: {message}") from None


def check_toml_shape(text: str) -> None:
    """TomlFileError if ``text`` nests arrays and inline tables deeper than MAX_NESTING, or has a key of more than
    MAX_KEY_PARTS parts or MAX_KEY_LENGTH characters, or more than MAX_KEY_DOTS dots in its keys together.

    A scan of TOML's tokens, not a parser: it follows where keys are (the start of a line outside any bracket, a
    table header, after ``{`` or ``,`` in an inline table) and counts brackets; whatever else is wrong with the text
    is tomllib's to say. On a valid document it sees every bracket and key tomllib does."""
    line = 1
    stack: list[str] = []  # the open brackets: "[" (an array or a header) or "{"
    in_key = True  # reading a key (until "=", or the "]" of a header)
    key_dots = length = dots = 0  # the dots and characters of the key being read; dots: of every key so far

    def fail(problem: str) -> TomlFileError:
        return TomlFileError(f"{problem} [line {line}]")

    for m in _TOKEN.finditer(text):
        kind, token = m.lastgroup, m.group()
        if kind == "newline":
            line += 1
            if not stack:
                in_key, key_dots, length = True, 0, 0
        elif kind == "string":
            line += token.count("\n")
            if in_key:
                length += len(token)
        elif kind == "other":
            if in_key:
                length += len(token)
        elif kind == "punct":
            if token == ".":
                if in_key:
                    key_dots += 1
                    dots += 1
                    if key_dots >= MAX_KEY_PARTS:
                        raise fail(f"a key of more than {MAX_KEY_PARTS} dotted parts")
                    if dots > MAX_KEY_DOTS:
                        raise fail(f"more than {MAX_KEY_DOTS:,} dots in keys")
            elif token in "[{":
                header = token == "[" and in_key and length == 0 and key_dots == 0  # "[table]" or "[[array]]"
                stack.append(token)
                if len(stack) > MAX_NESTING:
                    raise fail(f"arrays or inline tables nested deeper than {MAX_NESTING}")
                if token == "{":
                    in_key, key_dots, length = True, 0, 0
                elif not header:
                    in_key = False
            elif token in "]}":
                if stack:
                    stack.pop()
                in_key = False
            elif token == "=":
                in_key = False
            elif token == "," and stack and stack[-1] == "{":
                in_key, key_dots, length = True, 0, 0
        if in_key and length > MAX_KEY_LENGTH:
            raise fail(f"a key longer than {MAX_KEY_LENGTH:,} characters")


__all__ = ["MAX_NESTING", "MAX_TOML_BYTES", "TomlFileError", "check_toml_shape", "read_toml", "size_text"]
