"""The gRPC admin API (revoke, block, unblock, list) and the checks on what it is given."""
