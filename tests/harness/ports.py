"""Free loopback ports, so parallel tests and sessions never fight over fixed numbers."""

from servicekit.child_process import free_port

__all__ = ["free_port"]
