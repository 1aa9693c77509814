"""Agreement of `sgdeploy validate` with SGLang's own argument handling (docs/fidelity.md)."""
