"""What every layer speaks: findings (diagnostics), TOML files located at file:line, and nothing else."""
