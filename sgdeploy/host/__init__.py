"""A GPU host: how to reach it (SSH settings, the connection), what it has (facts, running servers), its unit files."""
