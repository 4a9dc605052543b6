"""Contract tests of the tritonserver command line against upstream's launch_triton_server.py pattern."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtkit.serve.command import LaunchSpec, build_command


def _spec(**overrides: object) -> LaunchSpec:
    values: dict[str, object] = dict(tritonserver=Path("/opt/tritonserver/bin/tritonserver"),
                                     repo_dir=Path("/models"), http_port=8000, grpc_port=8001, metrics_port=8002,
                                     shm_prefix="trtkit_abcd_")
    values.update(overrides)
    return LaunchSpec(**values)  # type: ignore[arg-type]


def _split_ranks(argv: list[str]) -> list[list[str]]:
    assert argv[:2] == ["mpirun", "--allow-run-as-root"]
    ranks, current = [], []
    for arg in argv[2:]:
        if arg == ":":
            ranks.append(current)
            current = []
        else:
            current.append(arg)
    return [*ranks, current]


def test_single_rank_runs_the_binary_directly_with_explicit_addresses() -> None:
    argv = build_command(_spec(backend_dir=Path("/b")))
    assert argv[0] == "/opt/tritonserver/bin/tritonserver"
    assert "mpirun" not in argv
    for expected in ("--model-repository=/models", "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
                     "--http-port=8000", "--grpc-port=8001", "--metrics-port=8002", "--backend-directory=/b",
                     "--disable-auto-complete-config",
                     "--backend-config=python,shm-region-prefix-name=trtkit_abcd_r0_"):
        assert expected in argv
    assert not any(arg.startswith("--model-control-mode") for arg in argv)


def test_container_binary_keeps_its_own_backend_directory() -> None:
    assert not any(arg.startswith("--backend-directory") for arg in build_command(_spec()))


@pytest.mark.parametrize("world_size", [2, 4])
def test_multi_rank_is_one_mpirun_block_per_rank(world_size: int) -> None:
    ranks = _split_ranks(build_command(_spec(world_size=world_size)))
    assert len(ranks) == world_size
    prefixes = set()
    for rank, args in enumerate(ranks):
        assert args[:3] == ["-n", "1", "/opt/tritonserver/bin/tritonserver"]
        assert "--model-repository=/models" in args and "--disable-auto-complete-config" in args
        shm = [a for a in args if a.startswith("--backend-config=python,shm-region-prefix-name=")]
        assert len(shm) == 1 and shm[0].endswith(f"r{rank}_")
        prefixes.add(shm[0])
        explicit = "--model-control-mode=explicit" in args
        assert explicit == (rank != 0), "only ranks > 0 load just the engine model"
        if rank:
            assert "--load-model=tensorrt_llm" in args
    assert len(prefixes) == world_size, "each rank needs its own shm prefix"


def test_other_ranks_load_every_named_engine_model() -> None:
    ranks = _split_ranks(build_command(_spec(world_size=2, tensorrt_llm_model_names=("llm_a", "llm_b"))))
    assert {"--load-model=llm_a", "--load-model=llm_b"} <= set(ranks[1])
    assert not any(a.startswith("--load-model") for a in ranks[0])


def test_world_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="world_size"):
        build_command(_spec(world_size=0))
