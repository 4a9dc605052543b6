"""`trtkit config validate`: every problem in one run, repeated keys refused, the GPU table consulted, and a
file that is no UTF-8 text is bad input (exit 1), not a bug (issue 38 items 5, 9, 11)."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import Ran

HEAD = "name: m\nmodel:\n  source: bundled:smollm2-135m\n"


def write(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "model.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


def test_three_typos_are_reported_in_one_run(tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    path = write(tmp_path, HEAD + "build:\n  max_bach_size: 8\n  max_input_len: 9000\nserve:\n  grcp_port: 9001\n"
                                  "  profile: fast\nclient:\n  default_max_token: 5\n")
    ran: Ran = trtkit("config", "validate", path)
    assert ran.code == 1 and "Traceback" not in ran.err
    lines = ran.err.splitlines()
    assert lines[0] == "error: 6 problems, each with its fix:"
    assert [line.split(": ", 2)[1].split(";")[0] for line in lines[1:]] == [
        "build.max_bach_size", "serve.grcp_port", "serve.profile", "client.default_max_token",
        "build.max_input_len (9000) must be below build.max_seq_len (2048)",
        "build.max_num_tokens (2048) must be at least build.max_input_len (9000) unless "
        "serve.enable_chunked_context is true"]
    assert "did you mean 'max_batch_size'?" in lines[1] and all(line.startswith(f"  {path}: ") for line in lines[1:])


def test_a_cross_field_rule_is_not_judged_on_a_default_the_user_never_wrote(tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    # max_seq_len is broken, so its default (2048) stands in; the rule comparing it with max_input_len must
    # not speak about a value the file does not hold
    path = write(tmp_path, HEAD + "build:\n  max_seq_len: lots\n  max_input_len: 2000\n")
    ran = trtkit("config", "validate", path)
    assert ran.code == 1 and ran.err.count("\n") == 1 and "build.max_seq_len: must be a whole number" in ran.err


def test_a_repeated_key_is_an_error_naming_both_lines(tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    path = write(tmp_path, HEAD + "build:\n  max_batch_size: 8\n  max_seq_len: 4096\n  max_batch_size: 64\n")
    ran = trtkit("config", "validate", path)
    assert ran.code == 1
    assert ran.err == (f"error: {path}: line 7: key 'max_batch_size' is repeated (first at line 5); YAML would "
                       "silently keep the last one, so remove one of them\n")


def test_target_gpu_is_checked_against_the_gpu_table(tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    path = write(tmp_path, HEAD + "build:\n  target_gpu: V100\n")
    ran = trtkit("config", "validate", path)
    assert ran.code == 1
    assert ran.err.startswith(f"error: {path}: build.target_gpu: 'V100' is not a GPU trtkit knows; use one of T4, ")
    assert trtkit("config", "validate", write(tmp_path, HEAD + "build:\n  target_gpu: h100\n")).code == 0


def test_a_config_that_is_not_utf8_is_bad_input_not_a_bug(tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    path = write(tmp_path, b"name: caf\xe9\nmodel:\n  source: bundled:smollm2-135m\n")
    ran = trtkit("config", "validate", path)
    assert ran.code == 1
    assert ran.err == (f"error: {path}: not UTF-8 text (byte 0xe9 at offset 9); a config is a YAML file: save it "
                       "as UTF-8\n")
