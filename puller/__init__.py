"""The puller daemon that runs on a test machine (the testbed issue builds it; empty for now)."""
