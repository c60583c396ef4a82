"""Revoked token ids and blocked subjects: the Redis store, the in-process mirror every check
reads, and the policy when Redis is away."""
