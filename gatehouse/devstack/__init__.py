"""The local stack `gatehouse dev` runs: processes, a development token issuer, checks."""
