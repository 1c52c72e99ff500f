"""The testbed: the mapper that drives the core over ZeroMQ, and what only it uses (journal, replay, exports)."""

# Nothing is re-exported: every caller imports the module it needs (mgst.testbed.mapper, .store, ...),
# so that loading one light module (the store, for `mgst export`) does not load the mapper and zmq.
