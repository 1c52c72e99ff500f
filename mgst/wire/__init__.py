"""The wire between the mapper and the pullers: the message format (protocol), CURVE keys (security), drop counts."""
