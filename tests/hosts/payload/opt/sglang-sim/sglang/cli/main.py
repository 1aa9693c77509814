"""The `sglang` console script: `sglang serve <flags>`."""

import sys


def main() -> int:
    argv = sys.argv[1:]
    if argv and argv[0] == "serve":
        from sglang_sim.server import main as serve

        serve(argv[1:], entry="serve")
        return 0
    if argv and argv[0] in ("version", "--version"):
        from sglang import __version__

        print(__version__)
        return 0
    sys.stderr.write(
        "usage: sglang [-h] {serve,version} ...\n"
        f"sglang: error: argument command: invalid choice: {argv[0] if argv else ''!r} "
        "(choose from 'serve', 'version')\n"
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
