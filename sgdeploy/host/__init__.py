"""A GPU host: how to reach it (SSH settings, the connection), what it has (facts, the SGLang
servers running on it) and the unit files found there. Knows nothing of profiles."""
