"""A TOML file is scanned before tomllib parses it: nesting and keys are bounded (mgst.toml_file), so a small file
can neither exhaust tomllib's recursion (a traceback) nor make it allocate gigabytes (a dotted key of n parts
costs memory quadratic in n: a 40 KB one took 1.6 GB); and no valid file of the project is refused."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tomllib
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgst import toml_file
from mgst.cli import main
from mgst.toml_file import MAX_KEY_PARTS, MAX_NESTING, TomlFileError, check_toml_shape, read_toml

ROOT = Path(__file__).resolve().parents[1]
SMALL = '[workload]\narrival_rates = [2.0]\n[machines]\nrates = [[8.0, 8.0]]\n[policy]\nname = "fcfs"\n'
CHILD_MEMORY = 1 << 30  # bytes of address space the child parsing the 40 KB key may map


def _valid_files() -> list[Path]:
    here = sorted(ROOT.glob("experiments/**/*.toml")) + sorted(ROOT.glob("tests/**/*.toml"))
    cpython = Path(tomllib.__file__).parent.parent / "test" / "test_tomllib" / "data" / "valid"  # if installed
    return here + sorted(cpython.glob("**/*.toml"))


def test_every_valid_toml_file_passes_the_scan_and_parses_the_same():
    files = _valid_files()
    assert len(files) > 30
    for path in files:
        text = path.read_text(encoding="utf-8")
        try:
            expected = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            continue
        check_toml_shape(text)  # (raises if it is refused)
        if path.is_relative_to(ROOT):
            assert read_toml(path) == expected


@pytest.mark.parametrize(("text", "said"), [
    ("x = " + "[" * 1000 + "]" * 1000 + "\n", f"arrays or inline tables nested deeper than {MAX_NESTING} [line 1]"),
    ("x = " + "{a = " * 1000 + "1" + "}" * 1000 + "\n", "arrays or inline tables nested deeper than 32 [line 1]"),
    ("\n\ny = [\n" + "[" * 40 + "]" * 40 + "]\n", "arrays or inline tables nested deeper than 32 [line 4]"),
    (".".join(["a"] * 40) + " = 1\n", f"a key of more than {MAX_KEY_PARTS} dotted parts [line 1]"),
    ("[x]\n[" + ".".join(["t"] * 40) + "]\n", "a key of more than 32 dotted parts [line 2]"),
    ("x = [{" + ".".join(["a"] * 40) + " = 1}]\n", "a key of more than 32 dotted parts [line 1]"),
    ("k" * 2000 + " = 1\n", "a key longer than 1,024 characters [line 1]"),
    ('"' + "q" * 2000 + '" = 1\n', "a key longer than 1,024 characters [line 1]"),
])
def test_deep_nesting_and_long_keys_are_refused_before_tomllib(text, said, tmp_path):
    path = tmp_path / "x.toml"
    path.write_text(text)
    with pytest.raises(TomlFileError, match=re.escape(said) + "$"):
        read_toml(path)


def test_a_byte_order_mark_is_named(tmp_path):
    """A file saved with a UTF-8 byte-order mark: tomllib says only "Invalid statement (at line 1, column 1)"."""
    path = tmp_path / "x.toml"
    path.write_bytes("\ufeff[workload]\narrival_rates = [1.0]\n".encode())
    with pytest.raises(TomlFileError, match="begins with a byte-order mark"):
        read_toml(path)


@pytest.mark.parametrize("data", [b"\xe5\x00\x01binary", b"\xff\xfe[a]\n", b"name = \"caf\xe9\"\n"])
def test_a_file_that_is_not_utf8_text_is_named_so(data, tmp_path):
    """It was Python's codec message ("'utf-8' codec can't decode byte 0xe5 in position 0: invalid continuation
    byte")."""
    path = tmp_path / "x.toml"
    path.write_bytes(data)
    with pytest.raises(TomlFileError, match=r"^not UTF-8 text \(byte 0x[0-9a-f]{2} at offset \d+\): a TOML file"):
        read_toml(path)


def test_brackets_dots_and_long_runs_inside_strings_and_values_are_not_keys():
    check_toml_shape('a = "' + "[{." * 5000 + '"\nb = \'' + "." * 5000 + "'\nc = \"\"\"\n" + "[[[." * 100
                     + '\n"""\n# [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[.\nd = [' + "1.5, " * 5000 + "]\n"
                     + "e = '''" + "{" * 100 + "'''\n" + ".".join(["f"] * MAX_KEY_PARTS) + " = 1979-05-27T07:32:00.5\n")


# Text made of the tokens that matter to the scan and to tomllib's recursion: whatever passes the scan is parsed
# or refused by tomllib with a syntax error, never a RecursionError or anything else.
_PIECES = ["[", "]", "{", "}", "a", "b", "=", ",", ".", " ", "\n", "1", '"', "'", '"""', "'''", "#", "x = ", "\\"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=120), st.integers(0, 60))
def test_text_the_scan_lets_through_never_breaks_tomllib(pieces, depth):
    text = "v = " + "[" * depth + "".join(pieces) + "]" * depth + "\n"
    try:
        check_toml_shape(text)
    except TomlFileError:
        return
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        pass


# The scan's tokens as a plain (backtracking) pattern spells them: obviously right, but it keeps memory per character
# of a string. mgst.toml_file's possessive one must cut every text into the same tokens.
_PLAIN_TOKEN = re.compile(r'''
    (?P<string> """(?:\\[\s\S]|[^\\])*?"""{1,3}
              | '\'\'[\s\S]*?\'\'\'{1,3}
              | "(?:\\.|[^"\\\n])*"
              | '[^'\n]*' )
  | (?P<comment> \#[^\n]* )
  | (?P<newline> \n )
  | (?P<punct> [\[\]{}=,.] )
  | (?P<blank> [ \t\r]+ )
  | (?P<other> [^"'\#\n\[\]{}=,. \t\r]+ | ["'] )
''', re.VERBOSE)


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet='"""\\\\\'a\n #[]=.,{}\t\r', max_size=40))
def test_the_scan_cuts_text_into_the_tokens_of_the_plain_pattern(text):
    assert [(m.lastgroup, m.span()) for m in toml_file._TOKEN.finditer(text)] == [
        (m.lastgroup, m.span()) for m in _PLAIN_TOKEN.finditer(text)]


@pytest.mark.parametrize("string", [
    '"' + "y" * 3_900_000 + '"',
    '"' + "y\\t" * 1_300_000 + '"',
    '"""' + 'yy\\n"' * 780_000 + '"""',
    "'''" + "y" * 3_900_000 + "'''",
], ids=["basic", "escapes", "multi-line", "literal"])
def test_a_string_of_megabytes_is_scanned_within_a_small_memory(string):
    """A 3.9 MB string value (under the 4 MiB a file may have) made the scan's regex keep a backtracking point per
    character or escape: 570 MB for a basic string, 330 MB for a multi-line one full of escapes."""
    text = "foo = " + string + "\n"
    tracemalloc.start()
    try:
        check_toml_shape(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MiB"
    assert tomllib.loads(text)["foo"]  # (valid TOML: the scan let it through)


def test_a_40_kb_dotted_key_is_refused_at_once_within_a_small_memory(tmp_path):
    """It took 1.6 GB to parse: here the child may map 1 GiB, and the error comes at once."""
    path = tmp_path / "k.toml"
    path.write_text(".".join(["a"] * 20_000) + " = 1\n")
    assert 39_000 < path.stat().st_size < 41_000

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))

    p = subprocess.run([sys.executable, "-m", "mgst", "simulate", str(path)], capture_output=True, text=True,
                       timeout=60, preexec_fn=limited, env={**os.environ, "MGST_PURE": "1", "PYTHONPATH": str(ROOT)})
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert p.stderr.strip() == f"mgst: error: {path}: (file): a key of more than 32 dotted parts [line 1]"


@pytest.mark.parametrize("command", [["simulate"], ["sweep"], ["lab", "status"]])
def test_every_toml_reader_says_it_in_one_line(command, tmp_path, capsys):
    """An experiment file, a sweep file and a lab hosts file nested too deep: one error line, exit 2 (it was
    RecursionError's traceback)."""
    path = tmp_path / "deep.toml"
    path.write_text(SMALL + "x = " + "[" * 2000 + "]" * 2000 + "\n")
    try:
        code = main([*command, str(path)])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr()
    said = err.err + err.out
    assert code == 2, said
    assert said.strip() == f"mgst: error: {path}: (file): arrays or inline tables nested deeper than 32 [line 7]"
