"""What every layer speaks: findings (diagnostics) and TOML files read with every problem located
at file:line. Imports nothing of sgdeploy."""
