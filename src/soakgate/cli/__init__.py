"""Thin command-line layer: each `cmd_*.py` parses arguments and calls one library function."""
