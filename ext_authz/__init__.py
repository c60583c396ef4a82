"""Gatehouse's Envoy Authorization service: JWT verification, revocation, claims as headers."""
