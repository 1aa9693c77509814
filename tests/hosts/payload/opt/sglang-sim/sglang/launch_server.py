"""python -m sglang.launch_server <flags>"""

import sys

if __name__ == "__main__":
    from sglang_sim.server import main

    main(sys.argv[1:], entry="launch_server")
