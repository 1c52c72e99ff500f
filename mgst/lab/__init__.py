"""`mgst lab`: puller daemons launched, shown and stopped on lab machines over SSH (docs/lab.md)."""
