"""Build hooks only: the metadata is in pyproject.toml.

Compiles the modules of ``mgst.build_info.COMPILED_MODULES`` with mypyc, and
the C modules of ``C_MODULES``, when it can (mypy installed, a C compiler, no
type error) and writes the sha256 of each source into ``mgst/_compiled.json``,
which ``mgst.build_info`` checks at import. On any failure it builds pure
Python, with one line on stderr. ``MGST_PURE_BUILD=1`` skips compiling. See
docs/build.md.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def _build_info():
    """mgst/build_info.py, loaded by path: importing the mgst package would run its import guard."""
    spec = importlib.util.spec_from_file_location("_mgst_build_info", ROOT / "mgst" / "build_info.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


info = _build_info()
PURE_BUILD = os.environ.get("MGST_PURE_BUILD", "").strip() == "1"
# Replaced in build_ext.run by mypyc's extensions: mypy runs only when something is built.
PLACEHOLDER = Extension("mgst._mypyc_placeholder", sources=[])


def _say(message: str) -> None:
    print(f"mgst build: {message}", file=sys.stderr)


class BuildMaybeCompiled(build_ext):
    """build_ext that compiles with mypyc, or falls back to pure Python on any failure."""

    def finalize_options(self) -> None:
        # mypy runs here, only when something is built: the extensions replace the placeholder.
        self._hashes: dict[str, str] | None = None
        extensions: list[Extension] = []
        if not PURE_BUILD:
            sources = [info.source_path(m, ROOT / "mgst") for m in info.COMPILED_MODULES]
            try:
                self._hashes = self._source_hashes()
                extensions = self._mypycify([p.relative_to(ROOT).as_posix() for p in sources])
                extensions += [self._c_extension(m) for m in info.C_MODULES]
            except BaseException as e:  # noqa: B036 (mypy exits on a type error; any failure means pure)
                self._fall_back(e)
        self.distribution.ext_modules = extensions
        super().finalize_options()

    def run(self) -> None:
        hash_file = self._hash_file()
        with contextlib.suppress(FileNotFoundError):
            hash_file.unlink()  # a build that fails leaves no hash: the guard then runs pure Python
        self._remove_stray_extensions(hash_file.parent)
        if not self.extensions:
            return
        try:
            super().run()
            if self._source_hashes() != self._hashes:
                raise RuntimeError("a source changed during the build; build again")
        except BaseException as e:  # noqa: B036 (no C compiler, a compile error: pure Python)
            self._fall_back(e)
            self.extensions = []
            return
        shared = [ext.name for ext in self.extensions if ext.name.endswith("__mypyc")]
        hash_file.parent.mkdir(parents=True, exist_ok=True)
        record = {"compiler": "mypyc", "shared_library": shared[0] if shared else None, "modules": self._hashes}
        hash_file.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")

    @staticmethod
    def _remove_stray_extensions(package: Path) -> None:
        """Delete the extension files of mgst modules no longer compiled (mgst.build_info.stray_extensions)."""
        if not package.is_dir():
            return
        for ext in info.stray_extensions(package):
            _say(f"removing {ext.relative_to(package.parent)}, built when its module was compiled")
            ext.unlink()

    @staticmethod
    def _source_hashes() -> dict[str, str]:
        return {m: info.sha256_of(path) for m, path in info.built_sources(ROOT / "mgst").items()}

    @staticmethod
    def _c_extension(module: str) -> Extension:
        """A module of info.C_MODULES: one C file, no library beyond Python's."""
        source = info.built_sources(ROOT / "mgst")[module].relative_to(ROOT).as_posix()
        return Extension(module, sources=[source])  # Python's own flags (-O3 on Linux)

    @staticmethod
    def _fall_back(e: BaseException) -> None:
        if isinstance(e, KeyboardInterrupt):
            raise e
        why = " ".join(str(e).split()) or "see above"
        if len(why) > 160:
            why = why[:157] + "..."
        _say(f"not compiled ({type(e).__name__}: {why}); pure Python build")

    def _hash_file(self) -> Path:
        base = ROOT if self.inplace or getattr(self, "editable_mode", False) else Path(self.build_lib)
        return base / "mgst" / info.HASH_FILE

    def _mypycify(self, paths: list[str]) -> list[Extension]:
        from mypyc.build import mypycify  # noqa: PLC0415 (only where mypy is installed)

        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                # follow-imports=silent: type errors in modules that are not compiled are not ours to stop on.
                return mypycify(["--follow-imports=silent", *paths], group_name="mgst", opt_level="3")
        except SystemExit as e:  # mypy's type errors: name the first on the fallback's line
            errors = [line for line in out.getvalue().splitlines() if ": error:" in line]
            raise RuntimeError(errors[0] if errors else f"mypyc exited with {e.code}") from None


setup(
    ext_modules=[] if PURE_BUILD else [PLACEHOLDER],
    cmdclass={"build_ext": BuildMaybeCompiled},
)
