"""The tensor names of the TensorRT-LLM 1.2 templates, where one model's name for a value is not another's.

A client asks the ensemble or ``tensorrt_llm_bls`` by the ensemble's names (``top_k``); the engine model
(``tensorrt_llm``) takes some of them under its own (``runtime_top_k``), and preprocessing under upper-case
ones (``QUERY``). These tables are read by the ensemble's generator, the BLS, the engine and preprocessing
models, and the clients, so that a name is mapped in one place.
"""

from __future__ import annotations

# ensemble / BLS input -> the engine model's input, where the names differ (the template's ensemble maps them)
ENGINE_NAMES = {"top_k": "runtime_top_k", "top_p": "runtime_top_p", "length_penalty": "len_penalty",
                "stream": "streaming"}
# what the BLS hands the engine as the client sent it (renamed by ENGINE_NAMES)
PASS_THROUGH = ("temperature", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed",
                "return_log_probs", "return_context_logits", "return_generation_logits", "return_perf_metrics",
                "prompt_embedding_table", "prompt_vocab_size",
                "lora_task_id", "lora_weights", "lora_config", "guided_decoding_guide_type", "guided_decoding_guide",
                "top_k", "top_p", "length_penalty", "stream")
# a request's sampling values, under the ensemble's names (a client's SamplingParams fields of the same name)
SAMPLING_INPUTS = ("temperature", "top_k", "top_p", "seed", "repetition_penalty", "presence_penalty",
                   "frequency_penalty", "min_tokens")
ID_INPUTS = ("end_id", "pad_id")  # token ids that override the tokenizer's
GUIDE_INPUTS = ("guided_decoding_guide_type", "guided_decoding_guide")  # guided decoding, the same on every model
# the flags that make the engine (the C++ backend) answer its counts: its cached tokens come with perf metrics
COUNT_FLAGS = ("return_num_input_tokens", "return_num_output_tokens", "return_perf_metrics")
# what a reader of the engine's responses needs (the text path's BLS and the clients' token path)
ENGINE_OUTPUTS_READ = ("output_ids", "num_input_tokens", "num_output_tokens", "num_cached_tokens",
                       "kv_cache_reused_blocks", "finish_reason")

# preprocessing's input -> the ensemble / BLS input it comes from (what a refusal names)
PREPROCESSING_NAMES = {"QUERY": "text_input", "DECODER_QUERY": "decoder_text_input",
                       "REQUEST_OUTPUT_LEN": "max_tokens", "BAD_WORDS_DICT": "bad_words",
                       "STOP_WORDS_DICT": "stop_words", "EMBEDDING_BIAS_WORDS": "embedding_bias_words",
                       "EMBEDDING_BIAS_WEIGHTS": "embedding_bias_weights", "END_ID": "end_id", "PAD_ID": "pad_id",
                       "PROMPT_TABLE_EXTRA_ID": "prompt_table_extra_id", "MIN_TOKENS": "min_tokens",
                       "MIN_LENGTH": "min_length", "PROMPT_FORM": "prompt_form",
                       # refused there unless 1: one sequence per request (triton_models.requests.refuse_many_sequences)
                       "BEAM_WIDTH": "beam_width", "NUM_RETURN_SEQUENCES": "num_return_sequences"}
