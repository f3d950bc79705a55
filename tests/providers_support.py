"""Moved to tests.support.inbound; this re-export goes once every import points there."""

from tests.support.inbound import inbound

__all__ = ["inbound"]
