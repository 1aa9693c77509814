"""One module per command: `register(sub)` adds its parser (its options, help and exit codes) and
`run(args)` runs it and returns its exit code. cli/main.py lists them in --help's order.

A command module imports only argparse and cli helpers at its top: what the command needs from
sgdeploy (pydantic, Jinja, Fabric behind it) is imported inside `run` or the helper that needs
it, so that `sgdeploy --help` and `sgdeploy validate` start fast."""
