"""The command line: `sgdeploy COMMAND ...` parses its arguments, runs one command, prints and
maps the result to an exit code.

main.py holds the parser and the dispatch, commands/ one module per command; arguments.py,
output.py, progress.py, targets.py and deploying.py what several commands share. Heavy
dependencies (pydantic, Jinja, Fabric) are imported inside the commands that need them, so that
`sgdeploy --help` and `sgdeploy validate` start fast.
"""

from sgdeploy.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
