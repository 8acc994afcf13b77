"""The LLM gateway: per-run bearers, explicit provider binding, metering and the hard cost kill."""
