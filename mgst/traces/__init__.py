"""Trace-driven platforms: the SDSC-like generator, platform files, business-hours start points, summaries."""
