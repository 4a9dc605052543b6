"""The ``ensemble`` model: preprocessing -> tensorrt_llm -> postprocessing, mapped as the 1.2 template does."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from trtkit.repository import pbtxt
from trtkit.repository.models import ENGINE, EXTRA_FRONT_INPUTS, EXTRA_OUTPUTS, STREAM_GATE
from trtkit.repository.settings import RepoSettings
from trtkit.wire.names import PREPROCESSING_NAMES

PRE_INPUTS = PREPROCESSING_NAMES
PRE_OUTPUTS = {"REQUEST_INPUT_LEN": "_REQUEST_INPUT_LEN", "INPUT_ID": "_INPUT_ID",
               "REQUEST_OUTPUT_LEN": "_REQUEST_OUTPUT_LEN", "STOP_WORDS_IDS": "_STOP_WORDS_IDS",
               "BAD_WORDS_IDS": "_BAD_WORDS_IDS", "OUT_END_ID": "_PREPROCESSOR_END_ID",
               "OUT_PAD_ID": "_PREPROCESSOR_PAD_ID", "OUT_MIN_TOKENS": "_MIN_TOKENS"}
ENGINE_INPUTS = {"input_ids": "_INPUT_ID", "input_lengths": "_REQUEST_INPUT_LEN",
                 "request_output_len": "_REQUEST_OUTPUT_LEN", "end_id": "_PREPROCESSOR_END_ID",
                 "pad_id": "_PREPROCESSOR_PAD_ID", "stop_words_list": "_STOP_WORDS_IDS",
                 "bad_words_list": "_BAD_WORDS_IDS", "min_tokens": "_MIN_TOKENS",
                 "exclude_input_in_output": "exclude_input_in_output", "runtime_top_k": "top_k",
                 "runtime_top_p": "top_p", "temperature": "temperature", "len_penalty": "length_penalty",
                 "repetition_penalty": "repetition_penalty", "presence_penalty": "presence_penalty",
                 "frequency_penalty": "frequency_penalty", "seed": "seed", "return_log_probs": "return_log_probs",
                 "return_context_logits": "return_context_logits",
                 "return_generation_logits": "return_generation_logits",
                 "return_perf_metrics": "return_perf_metrics", "return_num_input_tokens": "return_num_input_tokens",
                 "return_num_output_tokens": "return_num_output_tokens",
                 "streaming": "stream", "prompt_embedding_table": "prompt_embedding_table",
                 "prompt_vocab_size": "prompt_vocab_size", "lora_task_id": "lora_task_id",
                 "lora_weights": "lora_weights", "lora_config": "lora_config",
                 "guided_decoding_guide_type": "guided_decoding_guide_type",
                 "guided_decoding_guide": "guided_decoding_guide"}
ENGINE_PASSED_OUT = ("cum_log_probs", "output_log_probs", "context_logits", "generation_logits", "batch_index",
                     "sequence_index", "kv_cache_alloc_new_blocks", "kv_cache_reused_blocks",
                     "kv_cache_alloc_total_blocks", "arrival_time_ns", "first_scheduled_time_ns",
                     "first_token_time_ns", "last_token_time_ns", "acceptance_rate", "total_accepted_draft_tokens",
                     "total_draft_tokens", "num_input_tokens", "num_output_tokens")


def _step(config: mc.ModelConfig, model: str, inputs: dict[str, str], outputs: dict[str, str]) -> None:
    step = config.ensemble_scheduling.step.add(model_name=model, model_version=-1)
    for key, value in inputs.items():
        step.input_map[key] = value
    for key, value in outputs.items():
        step.output_map[key] = value


def ensemble(s: RepoSettings) -> mc.ModelConfig:
    """On CPU the engine also answers ``num_cached_tokens`` and ``finish_reason``, and hands on chunks that end
    on whole characters. The C++ backend does neither, so a streaming GPU ensemble runs it through
    ``stream_gate``, which answers as the CPU engine does (``trtkit.triton_models.stream_gate``); a GPU ensemble
    that does not stream gets one response with every token and leaves the extras out (``tensorrt_llm_bls``
    derives them on both). The engine's request key goes to postprocessing, which stops the engine when the
    client cancels."""
    extras = s.engine_extras or s.gated_stream
    config = mc.ModelConfig(name="ensemble", platform="ensemble", max_batch_size=s.max_batch_size)
    pbtxt.add_inputs(config, pbtxt.tensors("ensemble", "inputs") + EXTRA_FRONT_INPUTS)
    pbtxt.mark_optional(config, ("text_input", "max_tokens"))  # preprocessing refuses their absence by name
    outputs = pbtxt.with_logits_dtype(pbtxt.tensors("ensemble", "outputs"), s.logits_dtype)
    pbtxt.add_outputs(config, outputs + (EXTRA_OUTPUTS if extras else []))
    _step(config, "preprocessing", PRE_INPUTS, PRE_OUTPUTS)
    engine_out = {"output_ids": "_TOKENS_BATCH", "sequence_length": "_SEQUENCE_LENGTH"}
    engine_out.update({name: name for name in ENGINE_PASSED_OUT})
    if extras:
        engine_out.update({"num_cached_tokens": "num_cached_tokens", "finish_reason": "finish_reason",
                           "cpu_request_key": "_ENGINE_REQUEST_KEY"})
    _step(config, STREAM_GATE if s.gated_stream else ENGINE, ENGINE_INPUTS, engine_out)
    post_in = {"TOKENS_BATCH": "_TOKENS_BATCH", "SEQUENCE_LENGTH": "_SEQUENCE_LENGTH"}
    if extras:
        post_in["ENGINE_REQUEST_KEY"] = "_ENGINE_REQUEST_KEY"
    _step(config, "postprocessing", post_in, {"OUTPUT": "text_output"})
    return config
