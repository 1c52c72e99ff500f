"""Tables keep their columns whatever the names: a class or policy named in CJK or with emoji (two terminal columns a
character) pushed its row's figures right, and a long name ran into them."""

from __future__ import annotations

import dataclasses

from mgst.analysis.compare import format_comparison
from mgst.analysis.policy_comparison import format_policy_comparison
from mgst.results import Estimate, Summary, format_table
from mgst.wording import display_width, pad

NAMES = ("a", "負荷高", "🚀x", "a-class-name-longer-than-ten")


def summary(policy: str = "p") -> Summary:
    e = Estimate(10, 1.25, 1.0, 1.5)
    return Summary(experiment="x", mode="simulation", policy=policy, class_names=NAMES, classes=(e,) * len(NAMES),
                   overall=e, mean_wait=(0.0,) * len(NAMES), machine_names=("M1",), utilisation=(0.5,),
                   replications=5, horizon=1.0, warmup=0.1, seed=1, load=None, jobs_simulated=40, unfinished=0,
                   elapsed_s=1.0)


def columns_of(lines: list[str], figure: str) -> set[int]:
    """The terminal column where ``figure`` ends on each line holding it."""
    return {display_width(line[:line.index(figure) + len(figure)]) for line in lines if figure in line}


def test_display_width_counts_wide_characters_twice_and_combining_marks_not_at_all() -> None:
    assert display_width("abc") == 3 and display_width("負荷") == 4 and display_width("🚀") == 2
    assert display_width("e\u0301") == 1  # (e and a combining acute: one column)
    assert pad("負荷", 6) == "負荷  " and pad("toolong", 3) == "toolong"


def test_the_summary_table_keeps_its_columns_with_wide_and_long_class_names() -> None:
    lines = format_table(summary()).splitlines()
    rows = [line for line in lines if line.startswith((*NAMES, "Overall"))]
    assert len(rows) == len(NAMES) + 1
    assert len(columns_of(rows, " 10 ")) == 1 and len(columns_of(rows, "(1.000, 1.500)")) == 1, rows
    assert all(" 10 " in row for row in rows)  # (a space between the longest name and its count)


def test_the_testbed_beside_simulation_table_keeps_its_columns() -> None:
    testbed = dataclasses.replace(summary(), mode="testbed")
    rows = [line for line in format_comparison(testbed, summary()).splitlines() if line.startswith((*NAMES, "Over"))]
    assert len(rows) == len(NAMES) + 1 and len(columns_of(rows, "1.250")) == 1, rows


def test_the_policy_comparison_keeps_its_columns_with_a_wide_policy_name() -> None:
    lines = format_policy_comparison([summary("fcfs"), summary("政策🚀")]).splitlines()
    rows = [line for line in lines if line.startswith((*NAMES, "Overall"))]
    header = next(line for line in lines if line.startswith("Class"))
    second = display_width(header[:header.index("政策🚀")])
    assert all(display_width(row[:row.index("1.250", row.index("1.250") + 1)]) == second for row in rows), lines
