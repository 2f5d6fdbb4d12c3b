"""Test doubles: a tool module for the MCP server tests and a loopback HTTP server that replays
recorded model responses (``loopback``)."""
