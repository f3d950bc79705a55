"""Moved to tests.support.processes; this re-export goes once every import points there."""

from tests.support.events import lifecycle_bodies
from tests.support.processes import post_all, run_porteiro, serving, write_config
from tests.support.servers import free_port

__all__ = ["free_port", "lifecycle_bodies", "post_all", "run_porteiro", "serving", "write_config"]
