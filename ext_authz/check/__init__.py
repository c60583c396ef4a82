"""The lean HTTP check: the route table from the control plane, and each step a route's
request goes through (limits, credential, validation, waiting room, token swap)."""
