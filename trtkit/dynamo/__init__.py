"""NVIDIA Dynamo on one machine, with trtkit's CPU reference engine as a real Dynamo worker (docs/dynamo.md).

``cluster.py`` starts and stops a local cluster (the event-plane broker, Dynamo's frontend, N workers: trtkit's
``worker.py`` or Dynamo's mocker), all on 127.0.0.1 without etcd or NATS (``environment.py``). The worker speaks
Dynamo's token protocol (``token_protocol.py``) and publishes its KV block events to the frontend's KV router
(``kv_events.py``). ``worker.py`` and ``broker.py`` run in Dynamo's own environment (.venv-dynamo); the rest runs in
either.
"""

from trtkit.dynamo.cluster import ROUTER_MODES, ClusterSpec, DynamoCluster

__all__ = ["ROUTER_MODES", "ClusterSpec", "DynamoCluster"]
