"""Verifying a bearer JWT: issuers' keys (JWKS), verification, the verified-token cache,
claims as identity headers, a route's requirements."""
