"""Gatehouse: the Python control side of an Envoy API gateway."""

__version__ = "0.1.0"
