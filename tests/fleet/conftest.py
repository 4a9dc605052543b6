"""The fleet tests' shared replicas: two gateway replicas on one PostgreSQL database in front of the shared live
tritonserver, started once per session for every module that only reads and writes through them (the Responses and
Conversations APIs across replicas). A module that kills replicas or needs its own settings starts its own."""

from __future__ import annotations

import pytest

from tests.helpers.replicas import replica_config, start_replicas
from tests.helpers.stores import new_database


@pytest.fixture(scope="session")
def two_replicas(live_server, postgres_cluster, tmp_path_factory):  # type: ignore[no-untyped-def]
    """(replicas, store_url): two replicas sharing one store and ledger, leases of 5 s."""
    folder = tmp_path_factory.mktemp("two-replicas")
    store_url = new_database(postgres_cluster, "two_replicas")
    replicas = start_replicas(2, replica_config(folder, store_url, store_url, 5.0), live_server.grpc_url, folder)
    yield replicas, store_url
    for replica in replicas:
        replica.stop()
