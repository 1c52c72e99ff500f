"""The live view: a read-only web page of a running testbed experiment, served by the mapper (docs/live.md)."""
