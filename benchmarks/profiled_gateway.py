"""`trtkit gateway ...` with a CPU-time profiler on its event loop's thread, switched by signals: SIGUSR1 starts
it, SIGUSR2 stops it and writes the stats to $TRTKIT_PROFILE_OUT. benchmarks/upstream_cost.py --profile uses it to
say where the gateway's CPU per request goes (time.thread_time: the event loop's own CPU, not waits).

    TRTKIT_PROFILE_OUT=gw.prof python benchmarks/profiled_gateway.py gateway CONFIG --backend URL --port P
"""

from __future__ import annotations

import cProfile
import os
import signal
import sys
import time

from trtkit.cli.main import main

profile = cProfile.Profile(time.thread_time)


def _start(*_: object) -> None:
    profile.enable()


def _stop(*_: object) -> None:
    profile.disable()
    profile.dump_stats(os.environ["TRTKIT_PROFILE_OUT"])


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
    raise SystemExit(main(sys.argv[1:]))
