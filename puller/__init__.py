"""The puller daemon that runs on a test machine: registers, heartbeats, asks for work, runs it, reports."""
