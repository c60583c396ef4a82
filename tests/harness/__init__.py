"""Start real services (Envoy, Redis, sample upstreams) as processes for tests: no mocks."""
