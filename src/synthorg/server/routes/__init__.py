"""The REST and WebSocket routes of the agent server, one module per concern."""
