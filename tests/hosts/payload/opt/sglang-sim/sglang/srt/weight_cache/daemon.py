"""python -m sglang.srt.weight_cache.daemon <server flags> [--timeout S] [--force]"""

import sys

if __name__ == "__main__":
    from sglang_sim.weight_daemon import main

    main(sys.argv[1:])
