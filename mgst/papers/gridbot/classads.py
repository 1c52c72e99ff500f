"""GridBot's expression language: HTCondor's own ClassAds (the htcondor wheel's ``classad2``), imported at first use;
each expression parsed once, and every evaluation given a defined fallback."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Hashable
from typing import Any, Final

log = logging.getLogger(__name__)

# A bag's policy: the functional attributes of its classad (the paper's section 4.1).
JOB_REQUIREMENTS: Final = "JobRequirements"
RANK: Final = "Rank"
CONCURRENCY: Final = "Concurrency"
DEADLINE: Final = "Deadline"
REPLICATION_REQUIREMENTS: Final = "ReplicationRequirements"
GRID_POLICY: Final = "GridPolicy"
POLICY_ATTRIBUTES: Final = (JOB_REQUIREMENTS, RANK, CONCURRENCY, DEADLINE, REPLICATION_REQUIREMENTS, GRID_POLICY)

# The value an expression stands for when it evaluates to UNDEFINED, ERROR or a value of the wrong type (documented in
# docs/policies.md): a requirement does not hold (HTCondor's matchmaking: a Requirements that is not true refuses), a
# rank is 0 (HTCondor's Rank), a deadline is none; Concurrency's is the host's NumCpus (the policy supplies it).
BOOLEAN_FALLBACK: Final = False
RANK_FALLBACK: Final = 0.0
NO_DEADLINE: Final = math.inf

# An expression's text is at most this long (a file's typo, not a policy, beyond it).
MAX_TEXT: Final = 4096
# Parentheses, brackets and braces within one another in an expression, at most: HTCondor's parser refuses some 165
# (it recurses), and said only that the text was no expression; a policy nests a few.
MAX_NESTING: Final = 100

# Calls that read the wall clock or draw at random would make a run differ from its replay and from the same seed's
# simulation: refused when the expression is parsed. ``eval`` of a string could call them, so it is refused too.
_NOT_DETERMINISTIC: Final = re.compile(
    r"\b(?:time|random|eval)\s*\(|\b(?:abstime|formattime)\s*\(\s*\)|\bcurrenttime\b", re.IGNORECASE
)
_QUOTED: Final = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')

_module: Any = None
# Parsed expressions by their text: each is parsed once per process, whoever asks (the experiment's check when the
# file is loaded, then each replication's policy). The ad each was parsed in is kept with it.
_parsed: dict[str, tuple[Any, Any]] = {}


def classad2() -> Any:
    """HTCondor's ClassAd module, imported at the first use (a run without GridBot never imports it)."""
    global _module
    if _module is None:
        try:
            import classad2 as module  # noqa: PLC0415 (lazily: only GridBot's policies need it)
        except ImportError as err:
            raise ImportError("GridBot's policies need HTCondor's ClassAd module classad2, from the htcondor wheel: "
                              "pip install 'mgst[gridbot]'") from err
        _module = module
    return _module


def expression_text(value: Any) -> str:
    """A file's value as ClassAd text: a string is an expression; a boolean or a finite number, its literal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value!r}")
        return repr(value)
    if isinstance(value, str):
        return value
    raise ValueError(f"must be a ClassAd expression (a string), a number or a boolean, got {value!r}")


def parse(value: Any) -> Any:
    """The ClassAd expression a file's value gives (an ``ExprTree``), parsed once per text; ValueError saying why
    it is none (the caller names the bag and the attribute)."""
    text = expression_text(value)
    found = _parsed.get(text)
    if found is not None:
        return found[0]
    if not text.strip():
        raise ValueError("is empty: give a ClassAd expression")
    if len(text) > MAX_TEXT:
        raise ValueError(f"is {len(text)} characters long; at most {MAX_TEXT} are allowed")
    unquoted = _QUOTED.sub('""', text)
    depth = nesting(unquoted)
    if depth > MAX_NESTING:
        raise ValueError(f"is nested {depth} deep (parentheses, brackets and braces within one another); at most "
                         f"{MAX_NESTING} are allowed")
    call = _NOT_DETERMINISTIC.search(unquoted)
    if call is not None:
        used = re.sub(r"\W", "", call.group(0)) + ("()" if "(" in call.group(0) else "")
        raise ValueError(f"{text!r} uses {used}, which reads the wall clock or draws at random: "
                         "a run must be the same for a seed (the model time is Queue.Now)")
    module = classad2()
    # In parentheses, on a line of its own: a text cannot close the expression early and add attributes of its own
    # (an ad must then hold exactly one), and a // comment ends before the closing parenthesis. The text must parse
    # on its own too: in the parentheses, a stray ")" and a stray "(" would pair up (``false) || (true``).
    try:
        module.ExprTree(text + "\n")
        ad = module.ClassAd("[expression = (" + text + "\n)]")
    except Exception:  # (classad2.ClassAdException, or whatever its parser raises for a bad text)
        ad = None
    if ad is None or len(ad) != 1:
        raise ValueError(f"{text!r} is not a ClassAd expression (HTCondor's parser refused it)")
    tree = ad.lookup("expression")
    _parsed[text] = (tree, ad)
    return tree


def nesting(text: str) -> int:
    """How deep ``text``'s parentheses, brackets and braces go within one another (its quoted strings removed)."""
    depth = deepest = 0
    for c in text:
        if c in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in ")]}":
            depth = max(0, depth - 1)
    return deepest


def references(tree: Any) -> list[str]:
    """The attributes an expression refers to (``["Host.NumCpus", "Tail"]``)."""
    return [r for r in classad2().ClassAd().externalRefs(tree) if r]


def constant(tree: Any) -> tuple[bool, Any]:
    """(True, its value) if the expression refers to no attribute (``true``, ``10``, ``2 * 3``), else (False, None):
    a constant is evaluated once, not per request."""
    if references(tree):
        return False, None
    return True, tree.eval(classad2().ClassAd())


def as_boolean(value: Any) -> bool | None:
    """A requirement's value: a boolean, or a number (true when not 0, as HTCondor's matchmaking reads one); None for
    UNDEFINED, ERROR or any other type."""
    t = type(value)  # (classad2's UNDEFINED and ERROR are an IntEnum: not an int here)
    if t is bool:
        return value
    if (t is int or t is float) and value == value:
        return value != 0
    return None


def as_number(value: Any) -> float | None:
    """A number's value: an integer or a real (not NaN), or a boolean as 1 or 0 (as HTCondor reads one where it wants
    a number: ``Rank = Host.Speed > 1.5``); None for UNDEFINED, ERROR or any other type."""
    t = type(value)  # (classad2's UNDEFINED and ERROR are an IntEnum: not an int here)
    if t is bool:
        return 1.0 if value else 0.0
    if (t is int or t is float) and value == value:
        return float(value)
    return None


def as_deadline(value: Any) -> float | None:
    """A Deadline's value: a number > 0 (:func:`as_number`); None for one <= 0 (every replica would be past it as it
    is sent), UNDEFINED, ERROR or any other type."""
    number = as_number(value)
    return number if number is not None and number > 0.0 else None


def as_concurrency(value: Any) -> float | None:
    """A Concurrency's value: a number >= 1 (:func:`as_number`); None for one below (no host would take a job: the
    bag, and every bag ranked below it on the host, would starve), UNDEFINED, ERROR or any other type."""
    number = as_number(value)
    return number if number is not None and number >= 1.0 else None


def constant_problem(attribute: str, tree: Any) -> str | None:
    """Why ``tree``, as the policy attribute ``attribute``, is a constant that can never serve (it would fall back
    at every evaluation, or hold every job back, or expire every replica); None if it is no constant, or can."""
    fixed, value = constant(tree)
    if not fixed:
        return None
    if attribute in (JOB_REQUIREMENTS, REPLICATION_REQUIREMENTS, GRID_POLICY):
        if as_boolean(value) is None:
            return f"is always {describe(value)}: it would never hold (write false for that)"
        return None
    number = as_number(value)
    if number is None:
        return f"is always {describe(value)}, not a number"
    if attribute == CONCURRENCY and as_concurrency(number) is None:
        return f"is always {number:g}: no host would ever run a job of the bag (at least 1)"
    if attribute == DEADLINE and number <= 0.0:
        return (f"is always {number:g}: every replica would be past its deadline as it is sent (a Deadline is a time "
                "span after the replica is sent, > 0)")
    return None


def parse_attribute(attribute: str, value: Any) -> Any:
    """:func:`parse` of a file's value for the policy attribute ``attribute``: a ValueError too for a constant that
    can never serve as one (:func:`constant_problem`), saying the text."""
    tree = parse(value)
    problem = constant_problem(attribute, tree)
    if problem is not None:
        raise ValueError(f"{expression_text(value)!r} {problem}")
    return tree


def describe(value: Any) -> str:
    """An evaluation's result, for a log line."""
    name = getattr(value, "name", None)
    if name in ("Undefined", "Error"):
        return name.upper()
    return f"{value!r} (a {type(value).__name__})"


class Fallbacks:
    """Evaluations that fell back to their attribute's default: counted by attribute, each kind logged once.

    A kind is the attribute, the expression's text and what it gave (UNDEFINED, ERROR or a type): the first such
    evaluation is logged at WARNING with the bag, the value it gave and the default used; the others only counted.
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = dict.fromkeys(POLICY_ATTRIBUTES, 0)
        self._logged: set[Hashable] = set()

    def note(self, attribute: str, tree: Any, value: Any, fallback: Any, bag: int, why: str = "",
             counted: bool = True) -> None:
        """``why``: what was wanted, for a value of the right type that cannot serve (``"not a time span > 0"``);
        ``counted`` False: logged as any, not counted (a look from outside the core's decisions: the overlay's)."""
        if counted:
            self.counts[attribute] += 1
        got = describe(value)
        kind = (attribute, str(tree), got.split(" ", 1)[0] if got.isupper() else type(value).__name__, why)
        if kind not in self._logged:
            self._logged.add(kind)
            log.warning("gridbot: bag %d's %s %s gave %s%s: %r used instead (logged once; later ones are counted)",
                        bag, attribute, tree, got, f", {why}" if why else "", fallback)

    @property
    def total(self) -> int:
        return sum(self.counts.values())
