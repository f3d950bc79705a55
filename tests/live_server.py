"""Moved to tests.support.servers; this re-export goes once every import points there."""

from tests.support.servers import free_port, live_server, live_server_thread

__all__ = ["free_port", "live_server", "live_server_thread"]
