"""Simulated SGLang internals (sgdeploy test hosts)."""
