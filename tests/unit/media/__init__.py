"""Scrollback tests."""
