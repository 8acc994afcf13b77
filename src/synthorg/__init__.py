"""SynthOrg: a self-hosted control plane for autonomous coding agents."""
