"""Exit codes as the README states them (issue 38 items 9, 10): a malformed command line is a usage error, exit 2,
in every command; input the user must fix is exit 1 with one line, never 70 (a bug)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import LLAMA, TINY

USAGE_ERRORS = [
    ["keys", "create", "--name", "a", "--rpm", "0"],
    ["keys", "create", "--name", "a", "--period", "week"],
    ["keys", "create", "--name", ""],
    ["keys", "create", "--name", "a", "--budget-tokens", "5", "--budget-cost", "1"],
    ["usage", "--by", "tenant"],
    ["usage", "--format", "yaml"],
    ["plan", TINY, "--gpu", "L4", "--kv-cache-dtype", "fp16"],
    ["plan", TINY, "--gpu", "L4", "--kv-dtype", "fp16"],
    ["plan", TINY, "--gpu", "V100"],
    ["calibrate", TINY, "--kv-cache-dtype", "fp16"],
    ["calibrate", TINY, "--compare", "fp8,int3"],
    ["convert", TINY, "--dtype", "int8"],
    ["deploy", TINY, "--engine", ".", "--out", "x", "--profile", "fast"],
    ["deploy", TINY, "--engine", ".", "--out", "x", "--target", "tpu"],
    ["deploy", "k8s", LLAMA, "--out", "x", "--triton-replicas", "6-2"],
    ["chat", TINY, "--strategy", "longest"],
    ["generate", TINY, "hi", "--url", "grpc//127.0.0.1:8001"],
    ["generate", TINY, "hi", "--guide-type", "yaml"],
    ["gateway", TINY, "--backend", "http:/127.0.0.1"],
    ["bench"],
    ["bench", TINY],
    ["bench", TINY, "--endpoint", "127.0.0.1:8001", "--out", "x"],  # neither --concurrency nor --rate
    ["bench", TINY, "--endpoint", "127.0.0.1:8001", "--out", "x", "--concurrency", "1", "--slo", "ttft=fast"],
    ["bench", TINY, "--endpoint", "10.9.8.7:8001", "--out", "x", "--concurrency", "1"],
    ["tokens", "count", TINY],
    ["serve"],
    ["config", "validate"],
    ["nosuchcommand"],
    ["build", TINY, "--dry-run", "true"],
]


@pytest.mark.parametrize("argv", USAGE_ERRORS, ids=" ".join)
def test_a_malformed_command_line_exits_2(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          trtkit) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)  # nothing may be written, but if it were, not into the checkout
    ran = trtkit(*argv)
    assert ran.code == 2, (ran.code, ran.err)
    assert "Traceback" not in ran.err and "internal error" not in ran.err
    assert not (tmp_path / "x").exists()


def test_tokens_count_of_a_binary_file_is_bad_input_not_a_bug(trtkit, tiny_llama_dir: Path) -> None:  # type: ignore[no-untyped-def]
    ran = trtkit("tokens", "count", TINY, "@/bin/ls")
    assert ran.code == 1 and ran.err.count("\n") == 1
    assert ran.err.startswith("error: TEXT @/bin/ls: /bin/ls is not UTF-8 text (byte ")
    missing = trtkit("tokens", "count", TINY, "@/no/such/file")
    assert missing.code == 1 and "no such file /no/such/file" in missing.err
