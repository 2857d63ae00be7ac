"""What a parser raises for a message it will not answer normally."""

from __future__ import annotations


class FormErr(Exception):
    """The message is a query we cannot parse; answer FORMERR."""


class Drop(Exception):
    """Not worth an answer (a response, or too short to carry an ID)."""
