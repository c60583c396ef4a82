"""Routes, Services and EndpointSlices from the Kubernetes API, and Route status."""
