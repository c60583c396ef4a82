"""Child processes for tests: the same supervisor `gatehouse dev` uses."""

from servicekit.child_process import ManagedProcess, port_open, wait_for_port

__all__ = ["ManagedProcess", "port_open", "wait_for_port"]
