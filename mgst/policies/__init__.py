"""The policy registry: policy names as experiment files spell them, mapped to classes."""

from __future__ import annotations

import importlib
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mgst.model import Experiment
    from mgst.policies.base import Policy

# Filled in as policy modules land; see register().
_REGISTRY: dict[str, type] = {}

# The modules of the built-in policies, loaded before any other policy registers: this package's generic ones
# and the papers' (mgst/papers/<paper>/), named here so that this package imports no paper.
_BUILTIN_MODULES = (
    "mgst.papers.anglano.bot",
    "mgst.papers.anglano.bot_circular",
    "mgst.papers.anglano.bot_idle",
    "mgst.policies.fcfs",
    "mgst.papers.kondo.excl",
    "mgst.papers.kondo.pred",
    "mgst.papers.kondo.pri",
    "mgst.papers.mgst.lpas",
    "mgst.policies.random_choice",
    "mgst.papers.anglano.wqr",
    "mgst.papers.gridbot.policy",
)


def register(cls: type) -> type:
    """Class decorator: make a Policy subclass available under its ``name``.

    The compiled built-ins call it after their class instead, ``register(LpasDG)``: mypyc
    compiles only undecorated classes natively (docs/build.md).
    The built-ins are registered first, so a policy from elsewhere that takes a
    built-in's name is refused, with a message saying so.
    """
    if not isinstance(cls, type):  # @register("mine"): the name goes in the class, the decorator takes none
        raise TypeError(f"register({cls!r}): register is a decorator without arguments; give the class its name "
                        f"(name = {cls!r} in it) and write @register above it")
    name = getattr(cls, "name", "")
    if not name:
        raise ValueError(f"{cls.__qualname__} has no name")
    if cls.__module__ not in _BUILTIN_MODULES:
        _load_builtins()
    known = _REGISTRY.get(name)
    if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
        where = f"{known.__module__}.{known.__qualname__}"
        if known.__module__ in _BUILTIN_MODULES:
            raise ValueError(
                f"policy name {name!r} of {cls.__module__}.{cls.__qualname__} is built in (the policy {where}); "
                "choose another name"
            )
        raise ValueError(f"policy name {name!r} of {cls.__module__}.{cls.__qualname__} is taken by {where}")
    _REGISTRY[name] = cls
    return cls


def import_modules(modules: list[str] | tuple[str, ...]) -> None:
    """Import modules that register policies of their own (``mgst simulate --import``), after the built-ins."""
    _load_builtins()
    for module in modules:
        importlib.import_module(module)


def names() -> list[str]:
    """Names of every registered policy, sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def policy_class(name: str) -> type:
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(names())}") from None


def summary(name: str) -> str:
    """The first paragraph of policy ``name``'s class docstring on one line, reST markup taken out ('' if it has
    none): ``x`` and :role:`x` read as x.

    A class compiled with mypyc keeps no docstring: it is then read from the module's source.
    """
    import re  # noqa: PLC0415

    cls = policy_class(name)
    doc = cls.__doc__ or _source_docstring(cls)
    paragraph = " ".join(doc.strip().split("\n\n", 1)[0].split())
    paragraph = re.sub(r":[\w:]+:`~?([^`]*)`", r"\1", paragraph)
    return re.sub(r"``([^`]*)``", r"\1", paragraph)


def _source_docstring(cls: type) -> str:
    """``cls``'s docstring as written in its module's .py source, or ''."""
    import ast  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    module = sys.modules.get(cls.__module__)
    origin = getattr(module, "__file__", None)
    if not origin:
        return ""
    source = Path(origin).with_name(cls.__module__.rpartition(".")[2] + ".py")
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return ""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return ast.get_docstring(node) or ""
    return ""


def build_policy(experiment: Experiment, rng: random.Random) -> Policy:
    """The experiment's policy with its options, and, when the experiment detects failures by
    time-out, MGST's silence time-outs (the same for the simulator and the mapper)."""
    spec = experiment.policy
    cls = policy_class(spec.name)
    policy = cls(cls.Options.from_mapping(spec.options), rng)
    tb = experiment.testbed
    if tb.detection == "timeout":
        from mgst.policies.timeouts import SilenceTimeouts  # noqa: PLC0415 (keeps `import mgst.policies` light)

        policy.silence_timeouts = SilenceTimeouts(tb.timeout_factor)
    return policy


def check_options(name: str, options: Mapping[str, Any]) -> None:
    """Raise ValueError naming the option if ``options`` do not suit policy ``name``."""
    policy_class(name).Options.from_mapping(options)


class ExperimentKeyError(ValueError):
    """What a policy's ``check_experiment`` raises when the problem is at one key of the experiment file, outside
    ``[policy]`` (``workload.bags[2].attributes.Rank``: a bag's expression that does not parse): the file's error
    then names that key."""

    def __init__(self, key: str, problem: str):
        self.key = key
        self.problem = problem
        super().__init__(f"{key}: {problem}")


def check_experiment(experiment: Experiment) -> None:
    """Raise ValueError naming the policy if the experiment's policy cannot run its workload (a policy class may
    define a classmethod ``check_experiment(experiment)``: Kondo et al.'s need a Bag of Tasks); an
    :class:`ExperimentKeyError` names the key of the file at fault."""
    check = getattr(policy_class(experiment.policy.name), "check_experiment", None)
    if check is not None:
        check(experiment)


def check_names(name: str, options: Mapping[str, Any], class_names: Sequence[str],
                machine_names: Sequence[str]) -> None:
    """Raise ValueError naming the option if one of policy ``name``'s options that name a class or a machine
    names none of the experiment's."""
    kind: Any = policy_class(name).Options
    for keys, what, names in ((getattr(kind, "class_name_options", ()), "class", class_names),
                              (getattr(kind, "machine_name_options", ()), "machine", machine_names)):
        for key in keys:
            if key in options and options[key] not in names:
                raise ValueError(f"{key}: no {what} named {options[key]!r} (the experiment's: {', '.join(names)})")


def _load_builtins() -> None:
    """Import the built-in policies (each registers itself), by name from _BUILTIN_MODULES: they import this
    package for ``register``, so importing them here by name, at the first use, keeps the package free of an
    import of its own modules (no circle) and the list in one place."""
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)
