"""The event plane's broker: Dynamo's ZMQ publishers connect to it instead of binding.

In its direct mode every Dynamo process binds each of its event-plane ZMQ publishers (KV events, load metrics,
active sequences) on ``tcp://0.0.0.0:<random port>``: Dynamo 1.6.1 hard-codes that bind, and
``DYN_EVENT_PLANE_HOST`` only sets the address it advertises. With ``DYN_ZMQ_BROKER_URL=xsub=...,xpub=...``
publishers connect to a broker's XSUB socket and subscribers to its XPUB socket, so nothing of Dynamo listens on a
wildcard address; this broker binds both on 127.0.0.1. Run in Dynamo's environment (pyzmq):

    python -m trtkit.dynamo.broker --xsub-port 5601 --xpub-port 5602
"""

from __future__ import annotations

import argparse
import signal
import sys

import zmq


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m trtkit.dynamo.broker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--xsub-port", type=int, required=True)
    parser.add_argument("--xpub-port", type=int, required=True)
    args = parser.parse_args(argv)
    context = zmq.Context()
    xsub, xpub = context.socket(zmq.XSUB), context.socket(zmq.XPUB)
    xsub.bind(f"tcp://{args.host}:{args.xsub_port}")
    xpub.bind(f"tcp://{args.host}:{args.xpub_port}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        zmq.proxy(xsub, xpub)
    except (KeyboardInterrupt, zmq.ContextTerminated):
        pass
    finally:
        xsub.close(linger=0)
        xpub.close(linger=0)


if __name__ == "__main__":
    main()
