"""Forge webhooks: signed GitHub deliveries in, governed runs started by the control plane."""
