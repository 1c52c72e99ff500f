"""The optional mypyc build: the import guard's decision, no stale binary, and identical results.

The guard's decisions are tested on a fake package folder, with no build. The
tests that need a compiled build skip without one (`pip install -e .` makes it
where a C compiler is present; docs/build.md).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Greedy, make_core, plain

import mgst
from mgst import build_info
from mgst.build_info import COMPILED_MODULES, HASH_FILE, PURE_ENV, decide, sha256_of, source_path
from mgst.cli import main
from mgst.core import tuples
from mgst.core.decisions import Assign
from mgst.model import Job
from mgst.policies.base import Policy
from mgst.sim.event_heap import new_event_heap

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(mgst.__file__).resolve().parent
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
TIMEOUT = 60  # seconds, for each subprocess


def compiled_build_present() -> bool:
    """Whether a fresh compiled build is installed (whatever MGST_PURE says in this process)."""
    return decide(PACKAGE, environ={}) is None


needs_compiled = pytest.mark.skipif(
    not compiled_build_present(),
    reason=f"no fresh compiled build here ({decide(PACKAGE, environ={})}); `pip install -e .` makes one",
)


# ---------------------------------------------------------------- the guard's decision, on a fake package


@pytest.fixture
def fake_package(tmp_path: Path) -> Path:
    """A folder laid out as a compiled build: sources, extension files, the shared library, the hash file."""
    pkg = tmp_path / "mgst"
    hashes = {}
    for module, src in build_info.built_sources(pkg).items():  # the mypyc modules' .py, the C modules' .c
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(f'"""{module}"""\n')
        (src.parent / (src.stem + SUFFIX)).write_bytes(b"")
        hashes[module] = sha256_of(src)
    (tmp_path / ("mgst__mypyc" + SUFFIX)).write_bytes(b"")
    record = {"compiler": "mypyc", "shared_library": "mgst__mypyc", "modules": hashes}
    (pkg / HASH_FILE).write_text(json.dumps(record))
    return pkg


def test_stray_extensions_are_those_of_modules_no_longer_compiled(fake_package):
    # An earlier build compiled mgst/streams.py; it is no longer in COMPILED_MODULES: its extension would
    # shadow the source, unseen by the guard. Extensions of compiled modules, and a file with no source
    # beside it, are not stray.
    (fake_package / "streams.py").write_text('"""streams"""\n')
    old = fake_package / ("streams" + SUFFIX)
    old.write_bytes(b"")
    (fake_package / ("orphan" + SUFFIX)).write_bytes(b"")
    assert build_info.stray_extensions(fake_package) == [old]
    assert decide(fake_package, environ={}) is None  # the guard alone would not notice it


def test_all_fresh_means_compiled(fake_package):
    assert decide(fake_package, environ={}) is None


def test_no_hash_file_means_pure_not_built(fake_package):
    (fake_package / HASH_FILE).unlink()
    assert decide(fake_package, environ={}) == "not built"


def test_an_edited_source_means_pure_and_names_the_file(fake_package):
    with source_path("mgst.core.state", fake_package).open("a") as f:
        f.write("# edited\n")
    why = decide(fake_package, environ={})
    assert why is not None and "stale" in why and "mgst/core/state.py changed" in why and "pip install -e ." in why


@pytest.mark.parametrize("module", build_info.C_MODULES)
def test_an_edited_or_unbuilt_c_module_means_pure_and_names_it(fake_package, module):
    assert set(build_info.C_MODULES) == {"mgst.sim._event_heap", "mgst.core._tuples"}
    source = build_info.built_sources(fake_package)[module]
    shown = "mgst/" + source.relative_to(fake_package).as_posix()  # mgst/sim/_event_heap.c, mgst/core/_tuples.c
    extension = source.with_name(source.stem + SUFFIX)
    extension.unlink()
    assert f"the compiled extension of {shown} is missing" in decide(fake_package, environ={})
    extension.write_bytes(b"")
    with source.open("a") as f:
        f.write("/* edited */\n")
    assert f"stale, {shown} changed" in decide(fake_package, environ={})


def test_mgst_pure_means_pure_even_when_fresh(fake_package):
    assert decide(fake_package, environ={PURE_ENV: "1"}) == "MGST_PURE=1"
    assert decide(fake_package, environ={PURE_ENV: "0"}) is None


def test_a_missing_extension_or_shared_library_means_pure(fake_package):
    (fake_package.parent / ("mgst__mypyc" + SUFFIX)).unlink()
    assert "mgst__mypyc" in decide(fake_package, environ={})
    (fake_package.parent / ("mgst__mypyc" + SUFFIX)).write_bytes(b"")
    src = source_path("mgst.sim.loop", fake_package)
    (src.parent / (src.stem + SUFFIX)).unlink()
    assert "mgst/sim/loop.py is missing" in decide(fake_package, environ={})


def test_a_module_not_in_the_hash_file_means_stale(fake_package):
    record = json.loads((fake_package / HASH_FILE).read_text())
    del record["modules"]["mgst.policies.base"]
    (fake_package / HASH_FILE).write_text(json.dumps(record))
    assert "mgst.policies.base was not compiled" in decide(fake_package, environ={})


def test_an_unreadable_hash_file_means_pure(fake_package):
    (fake_package / HASH_FILE).write_text("{")
    assert "unreadable" in decide(fake_package, environ={})


def test_the_source_finder_loads_exactly_the_compiled_modules_from_their_sources(fake_package):
    finder = build_info._SourceFinder(fake_package)
    for module in COMPILED_MODULES:
        spec = finder.find_spec(module)
        assert isinstance(spec.loader, importlib.machinery.SourceFileLoader)
        assert spec.origin == str(source_path(module, fake_package))
    assert finder.find_spec("mgst.model") is None
    assert finder.find_spec("mgst.papers.anglano.wqr") is None



def test_the_source_finder_loads_stray_modules_from_their_sources(fake_package):
    (fake_package / "streams.py").write_text('"""streams"""\n')
    (fake_package / ("streams" + SUFFIX)).write_bytes(b"")
    [stray] = build_info.stray_extensions(fake_package)
    module = build_info.module_of(stray.with_name("streams.py"), fake_package)
    assert module == "mgst.streams"
    finder = build_info._SourceFinder(fake_package, (module,))
    assert finder.find_spec("mgst.streams").origin == str(fake_package / "streams.py")
    assert finder.find_spec("mgst.core.state") is None  # the compiled modules are not its business here

def test_this_process_runs_what_the_guard_decided():
    files = [importlib.import_module(m).__file__ for m in COMPILED_MODULES]
    compiled = [f.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)) for f in files]
    assert all(compiled) if build_info.compiled() else not any(compiled)
    heap = type(new_event_heap())  # the C event heap exactly with the compiled modules
    assert heap.__module__ == ("mgst.sim._event_heap" if build_info.compiled() else "mgst.sim.event_heap")
    assert (tuples.new_tuple is not tuples.py_new_tuple) == build_info.compiled()  # and the C new_tuple
    assert tuples.runs_compiled() == build_info.compiled()  # the core decides by itself, as the guard did
    if os.environ.get(PURE_ENV) == "1":
        assert not build_info.compiled() and build_info.build() == "pure Python: MGST_PURE=1"


def test_version_names_the_build(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("mgst ") and out.endswith(f"({build_info.build()})")


# ---------------------------------------------------------------- a real compiled build, copied


PROBE = """
import json, sys
import mgst.build_info as b
for m in b.COMPILED_MODULES:
    __import__(m)
print(json.dumps({"build": b.build(), "files": {m: sys.modules[m].__file__ for m in b.COMPILED_MODULES}}))
"""


def _run(code: str, pythonpath: Path | None = None, args: tuple[str, ...] = (),
         **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in (PURE_ENV, "PYTHONPATH")}
    if pythonpath is not None:
        environ["PYTHONPATH"] = str(pythonpath)
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=TIMEOUT, env=environ,
        cwd=pythonpath or ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done


@needs_compiled
def test_an_edited_copy_of_a_compiled_build_runs_pure_python(tmp_path):
    """Copy the installed build (the package and the shared library beside it), check it runs compiled,
    edit one source, and check every compiled module then loads from its .py file."""
    shared = json.loads((PACKAGE / HASH_FILE).read_text())["shared_library"]
    spec = importlib.util.find_spec(shared)
    assert spec is not None and spec.origin, f"shared library {shared} not found"
    shutil.copytree(PACKAGE, tmp_path / "mgst", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(spec.origin, tmp_path / Path(spec.origin).name)

    first = json.loads(_run(PROBE, tmp_path).stdout)
    assert first["build"] == "compiled: mypyc"
    for module, file in first["files"].items():
        assert file.startswith(str(tmp_path)), (module, file)  # the copy, not the installed build
        assert file.endswith(SUFFIX), (module, file)
    scheduler = _run("import mgst.core.scheduler as s; print(s.__file__)", tmp_path).stdout.strip()
    assert scheduler == str(tmp_path / "mgst" / "core" / ("scheduler" + SUFFIX))

    with (tmp_path / "mgst" / "core" / "scheduler.py").open("a") as f:
        f.write("# an edit after the build\n")
    stale = _run(PROBE, tmp_path)
    after = json.loads(stale.stdout)
    assert after["build"] == (
        "pure Python: the compiled build is stale, mgst/core/scheduler.py changed; rebuild with pip install -e ."
    )
    for module, file in after["files"].items():
        assert file == str(source_path(module, tmp_path / "mgst")), (module, file)
    assert stale.stderr.count("mgst/core/scheduler.py changed") == 1  # one warning, logged
    version = _run("from mgst.cli import main; main(['--version'])", tmp_path).stdout
    assert "pure Python: the compiled build is stale, mgst/core/scheduler.py changed" in version

    pure = json.loads(_run(PROBE, tmp_path, **{PURE_ENV: "1"}).stdout)
    assert pure["build"] == "pure Python: MGST_PURE=1"


# ---------------------------------------------------------------- identical results, job by job


# The MGST paper's six settings (test_paper.py checks their figures, on the compiled build when there is one),
# and HiHi MFD/FD at a longer horizon: each setting's replication 0, short.
SAME_JOBS = {"hihi-mfd-fd": 1000.0, **{name: 200.0 for name in (
    "hihi-mpd-fd", "hihi-mfd-fe", "hihi-mpd-fe", "lohi-mfd-fd", "lohi-mpd-fd")}}

SIMULATE = """
import dataclasses, json, sys
import mgst.build_info as b
from mgst.config import load_experiment
from mgst.sim.loop import Simulation
runs = {}
for name, horizon in json.loads(sys.argv[1]).items():
    exp = load_experiment(f"experiments/{name}.toml")
    exp = dataclasses.replace(exp, simulation=dataclasses.replace(exp.simulation, seed=1, horizon=horizon,
                                                                  replications=1))
    run = Simulation(exp, replication=0).run()
    rows = [(r.job.id, r.job.job_class, r.job.submitted, r.first_sent, r.completed, r.done_on) for r in run.jobs]
    runs[name] = {"rows": rows, "end": run.end_time}
print(json.dumps({"build": b.build(), "runs": runs}))
"""


def _simulate(**env: str) -> dict:
    # (floats round-trip exactly through JSON: repr)
    return json.loads(_run(SIMULATE, args=(json.dumps(SAME_JOBS),), **env).stdout)


def test_pure_python_and_compiled_builds_give_the_same_jobs():
    """Job by job, on each of the MGST paper's settings: so the paper's figures, checked once on the compiled
    build (test_paper.py), hold for the pure one too."""
    pure = _simulate(**{PURE_ENV: "1"})
    assert pure["build"] == "pure Python: MGST_PURE=1"
    assert set(pure["runs"]) == set(SAME_JOBS)
    for run in pure["runs"].values():
        assert len(run["rows"]) > 1000 and all(row[4] is not None for row in run["rows"][:100])
    if not compiled_build_present():
        pytest.skip("no compiled build: only the pure half ran")
    compiled = _simulate()
    assert compiled["build"] == "compiled: mypyc"
    for name, run in compiled["runs"].items():
        mine = pure["runs"][name]
        assert len(run["rows"]) == len(mine["rows"]), name
        for a, b in zip(run["rows"], mine["rows"]):
            assert a == b, name  # id, class, submitted, first sent, completed, machine: exactly
        assert run["end"] == mine["end"], name


# ---------------------------------------------------------------- what compiling asked of the Policy base


def test_a_policy_sets_max_replicas_in_its_class_body_or_per_instance():
    """Policy.max_replicas is a ClassVar so that compiled code reads both kinds of override (a native
    attribute's slot would miss the class-body one): the core then starts two replicas of one job."""

    class TwoInBody(Greedy):
        max_replicas = 2

        def __init__(self) -> None:
            Policy.__init__(self)  # not Greedy's, which sets max_replicas per instance
            self.limit_aware = True

    for policy in (TwoInBody(), Greedy(max_replicas=2)):
        core = make_core(policy, [[1.0, 1.0, 1.0]])
        for j in range(3):
            core.machine_ready(0.0, j)
        j1 = Job(1, 0, 1.0)
        assert plain(core.job_arrived(1.0, j1)) == [Assign(j1, 0, 1, 0.0), Assign(j1, 1, 2, 0.0)], type(policy)


def test_the_compiled_modules_table_of_docs_build_md_names_every_compiled_module():
    """docs/build.md's "What is compiled" table names exactly COMPILED_MODULES (a row's `dir/a.py`, `b.py` is
    dir/a.py and dir/b.py): a module added to the list and not to the table once went unnoticed."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "build.md").read_text()
    section = text.split("## What is compiled", 1)[1].split("\n\n", 2)[2].split("\n\n", 1)[0]
    named: set[str] = set()
    for row in section.splitlines()[2:]:  # past the header and its rule
        folder = ""
        for token in row.split("|")[1].replace("`", " ").replace(",", " ").split():
            if "/" in token:
                folder, _, token = token.rpartition("/")
            named.add(f"{folder}/{token}")
    assert named == {f"{m.replace('.', '/')}.py" for m in COMPILED_MODULES}
