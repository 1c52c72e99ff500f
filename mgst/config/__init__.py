"""Experiment files (TOML) -> Experiment; every error names the key (the parser is in ``experiment``)."""

from mgst.config.experiment import (
    MAX_DURATION,
    MAX_JOBS,
    MAX_RATE,
    MAX_REPLICATIONS,
    MAX_SEED,
    MAX_TIME,
    MAX_TIME_UNIT,
    MAX_WORKERS,
    MIN_RATE,
    MIN_TIME_UNIT,
    SEED_RULE,
    ConfigError,
    load_experiment,
    parse_experiment,
)

__all__ = [
    "MAX_DURATION",
    "MAX_JOBS",
    "MAX_RATE",
    "MAX_REPLICATIONS",
    "MAX_SEED",
    "MAX_TIME",
    "MAX_TIME_UNIT",
    "MAX_WORKERS",
    "MIN_RATE",
    "MIN_TIME_UNIT",
    "SEED_RULE",
    "ConfigError",
    "load_experiment",
    "parse_experiment",
]
