"""Every availability kind on the wire: the mapper's form decodes as sent, a malformed one is refused saying why."""

from __future__ import annotations

import math

import pytest

from mgst.availability import registry
from mgst.availability.markov3 import Markov3Availability, Markov3Group
from mgst.availability.trace import MAX_WIRE_PERIODS
from mgst.model import Experiment, FailureModel, JobClass, Machine, PolicySpec, WeibullGroup, WeibullNormalFailures
from mgst.wire import protocol as P

CHAIN = ((0.9, 0.08, 0.02), (0.3, 0.7, 0.0), (0.2, 0.0, 0.8))


def welcome(failures) -> bytes:
    return P.encode(P.Welcome(P.PROTOCOL_VERSION, 0, 1.0, 0.2, 1.0, "emulate", failures, 1, 0.0))


def begin(failures) -> bytes:
    return P.encode(P.Begin(failures))


def experiment(failures) -> Experiment:
    return Experiment("w", (JobClass("1", 1.0),), (Machine("M1", (1.0,)),), PolicySpec("fcfs"), failures=failures)


@pytest.mark.parametrize("model", [
    FailureModel(50.0, 2.0),
    WeibullNormalFailures((WeibullGroup(100.0, 0.5, 5.0, 1.0),)),
    Markov3Availability((Markov3Group(CHAIN, 60.0, 0.25),)),
], ids=["exponential", "weibull", "markov3"])
def test_each_kind_s_form_crosses_the_wire_and_plays_the_simulator_s_periods(model) -> None:
    exp = experiment(model)
    form = registry.to_wire(exp, 0, 12, math.inf)
    for frame in (welcome(form), begin(form)):
        got = P.decode(frame).failures
        assert got == form
    played = registry.process_from_wire(got, 0, 1.0)
    simulated = registry.make_process(exp, 12, 0, 0)
    assert [played.next() for _ in range(100)] == [simulated.next() for _ in range(100)]


@pytest.mark.parametrize(("form", "fragment"), [
    ("exponential", "non-empty tuple"),
    ((), "non-empty tuple"),
    (("gamma", 1.0, 2.0, 3), "unknown failure model 'gamma'"),
    ((7, 1.0, 2.0, 3), "unknown failure model 7"),
    (("exponential", 1.0, 2.0), "seed"),
    (("exponential", 1.0, 2.0, 3.0, 4), "(mean_up, mean_down, seed)"),
    (("exponential", float("nan"), 2.0, 3), "non-finite"),
    (("exponential", -1.0, 2.0, 3), "mean_up > 0"),
    (("weibull", 100.0, 0.5, 10.0, 3), "(mttf, shape, repair_mean, repair_sd, seed)"),
    (("weibull", 100.0, 0.5, 10.0, -1.0, 3), "repair_sd >= 0"),
    (("weibull", 100.0, float("inf"), 10.0, 1.0, 3), "non-finite"),
    (("markov3", 60.0, 0.0, 0.9, 0.05, 0.0, 0.3, 0.7, 0.0, 0.2, 0.0, 0.8, 1), "the UP row sums to 0.95"),
    (("markov3", 60.0, 0.0, 0.9, 0.1, 0.0, 0.3, 0.7, 0.0, 0.2, 0.0, 0.8), "seed"),
    (("markov3", -60.0, 0.0, 0.9, 0.1, 0.0, 0.3, 0.7, 0.0, 0.2, 0.0, 0.8, 1), "slot must be > 0"),
    (("trace", [[1.0, 0, 1.0]] * (MAX_WIRE_PERIODS + 1)), "at most 1,000"),
    (("trace", [[1.0, 4, 1.0]]), "state 4"),
])
def test_a_malformed_form_is_refused_by_the_protocol_saying_why(form, fragment) -> None:
    for frame in (welcome(form), begin(form)):
        with pytest.raises(P.ProtocolError) as err:
            P.decode(frame)
        assert err.value.reason == P.Drop.BAD_VALUE and fragment in err.value.detail, err.value
    with pytest.raises(ValueError, match="failure model|markov3|trace|seed"):
        registry.process_from_wire(form, 0, 1.0)
