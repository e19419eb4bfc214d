"""Checks that decide whether a serving pod answers correctly (filled in by the canary work)."""
