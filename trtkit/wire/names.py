"""Every tensor name of the contract, once, and the tables where one model's name for a value is not another's.

A client asks the ensemble or ``tensorrt_llm_bls`` by the ensemble's names (``top_k``); the engine model
(``tensorrt_llm``) takes some of them under its own (``runtime_top_k``), and preprocessing under upper-case
ones (``QUERY``). The names come from TensorRT-LLM 1.2's templates (``trtkit/contracts/tensorrtllm_backend_1.2.json``,
which tests/wire/test_contract.py holds these to) plus trtkit's own extras. Code on either side of Triton names a
tensor by these constants, never by a string of its own (tests/wire/test_names.py scans for one).
"""

from __future__ import annotations

# -- the engine model's (tensorrt_llm) inputs --------------------------------------------------------------------
INPUT_IDS = "input_ids"
INPUT_LENGTHS = "input_lengths"
REQUEST_OUTPUT_LEN = "request_output_len"
END_ID = "end_id"
PAD_ID = "pad_id"
STOP_WORDS_LIST = "stop_words_list"
BAD_WORDS_LIST = "bad_words_list"
EMBEDDING_BIAS = "embedding_bias"
STREAMING = "streaming"
EXCLUDE_INPUT_IN_OUTPUT = "exclude_input_in_output"
STOP = "stop"  # the template's stop request (wire/stop_request.py)
TEMPERATURE = "temperature"
RUNTIME_TOP_K = "runtime_top_k"
RUNTIME_TOP_P = "runtime_top_p"
LEN_PENALTY = "len_penalty"
REPETITION_PENALTY = "repetition_penalty"
PRESENCE_PENALTY = "presence_penalty"
FREQUENCY_PENALTY = "frequency_penalty"
SEED = "seed"
MIN_TOKENS = "min_tokens"
MIN_LENGTH = "min_length"  # min_tokens' older name (genai-perf sends it); trtkit's extra
BEAM_WIDTH = "beam_width"
NUM_RETURN_SEQUENCES = "num_return_sequences"
RETURN_LOG_PROBS = "return_log_probs"
RETURN_CONTEXT_LOGITS = "return_context_logits"
RETURN_GENERATION_LOGITS = "return_generation_logits"
RETURN_PERF_METRICS = "return_perf_metrics"
RETURN_NUM_INPUT_TOKENS = "return_num_input_tokens"
RETURN_NUM_OUTPUT_TOKENS = "return_num_output_tokens"
GUIDE_TYPE = "guided_decoding_guide_type"
GUIDE = "guided_decoding_guide"
PROMPT_EMBEDDING_TABLE = "prompt_embedding_table"
PROMPT_VOCAB_SIZE = "prompt_vocab_size"
LORA_TASK_ID = "lora_task_id"
LORA_WEIGHTS = "lora_weights"
LORA_CONFIG = "lora_config"

# -- the engine model's outputs (the template's, then trtkit's extras) -------------------------------------------
OUTPUT_IDS = "output_ids"
SEQUENCE_LENGTH = "sequence_length"
CUM_LOG_PROBS = "cum_log_probs"
OUTPUT_LOG_PROBS = "output_log_probs"
CONTEXT_LOGITS = "context_logits"
GENERATION_LOGITS = "generation_logits"
BATCH_INDEX = "batch_index"
SEQUENCE_INDEX = "sequence_index"
CONTEXT_PHASE_PARAMS = "context_phase_params"
KV_CACHE_ALLOC_NEW_BLOCKS = "kv_cache_alloc_new_blocks"
KV_CACHE_REUSED_BLOCKS = "kv_cache_reused_blocks"
KV_CACHE_ALLOC_TOTAL_BLOCKS = "kv_cache_alloc_total_blocks"
ARRIVAL_TIME_NS = "arrival_time_ns"
FIRST_SCHEDULED_TIME_NS = "first_scheduled_time_ns"
FIRST_TOKEN_TIME_NS = "first_token_time_ns"
LAST_TOKEN_TIME_NS = "last_token_time_ns"
ACCEPTANCE_RATE = "acceptance_rate"
TOTAL_ACCEPTED_DRAFT_TOKENS = "total_accepted_draft_tokens"
TOTAL_DRAFT_TOKENS = "total_draft_tokens"
NUM_INPUT_TOKENS = "num_input_tokens"
NUM_OUTPUT_TOKENS = "num_output_tokens"
NUM_CACHED_TOKENS = "num_cached_tokens"  # trtkit's: prompt tokens served from the KV cache
FINISH_REASON = "finish_reason"  # trtkit's: end_id, stop, length, cancelled
CPU_REQUEST_KEY = "cpu_request_key"  # trtkit's: the engine request's own id, what postprocessing stops a stream by

# -- the ensemble's and tensorrt_llm_bls's own inputs and outputs (the front models) --------------------------------
TEXT_INPUT = "text_input"
TEXT_OUTPUT = "text_output"
MAX_TOKENS = "max_tokens"
STREAM = "stream"
TOP_K = "top_k"
TOP_P = "top_p"
LENGTH_PENALTY = "length_penalty"
STOP_WORDS = "stop_words"
BAD_WORDS = "bad_words"
PROMPT_FORM = "prompt_form"  # trtkit's: plain, raw or rendered (trtkit.tokenizer.prompt_forms)

# -- tables -------------------------------------------------------------------------------------------------------
# ensemble / BLS input -> the engine model's input, where the names differ (the template's ensemble maps them)
ENGINE_NAMES = {TOP_K: RUNTIME_TOP_K, TOP_P: RUNTIME_TOP_P, LENGTH_PENALTY: LEN_PENALTY, STREAM: STREAMING}
# what the BLS hands the engine as the client sent it (renamed by ENGINE_NAMES)
PASS_THROUGH = (TEMPERATURE, REPETITION_PENALTY, PRESENCE_PENALTY, FREQUENCY_PENALTY, SEED,
                RETURN_LOG_PROBS, RETURN_CONTEXT_LOGITS, RETURN_GENERATION_LOGITS, RETURN_PERF_METRICS,
                PROMPT_EMBEDDING_TABLE, PROMPT_VOCAB_SIZE,
                LORA_TASK_ID, LORA_WEIGHTS, LORA_CONFIG, GUIDE_TYPE, GUIDE,
                TOP_K, TOP_P, LENGTH_PENALTY, STREAM)
# ... of which trtkit reads nothing: the C++ backend's features, handed on as sent (the CPU engines refuse them)
PASSED_UNREAD = (RETURN_CONTEXT_LOGITS, RETURN_GENERATION_LOGITS, PROMPT_EMBEDDING_TABLE, PROMPT_VOCAB_SIZE,
                 LORA_TASK_ID, LORA_WEIGHTS, LORA_CONFIG)
# a request's sampling values, under the ensemble's names (a client's SamplingParams fields of the same name)
SAMPLING_INPUTS = (TEMPERATURE, TOP_K, TOP_P, SEED, REPETITION_PENALTY, PRESENCE_PENALTY, FREQUENCY_PENALTY,
                   MIN_TOKENS)
ID_INPUTS = (END_ID, PAD_ID)  # token ids that override the tokenizer's
GUIDE_INPUTS = (GUIDE_TYPE, GUIDE)  # guided decoding, the same on every model
# the flags that make the engine (the C++ backend) answer its counts: its cached tokens come with perf metrics
COUNT_FLAGS = (RETURN_NUM_INPUT_TOKENS, RETURN_NUM_OUTPUT_TOKENS, RETURN_PERF_METRICS)
# what a reader of the engine's responses needs (the text path's BLS and the clients' token path)
ENGINE_OUTPUTS_READ = (OUTPUT_IDS, NUM_INPUT_TOKENS, NUM_OUTPUT_TOKENS, NUM_CACHED_TOKENS, KV_CACHE_REUSED_BLOCKS,
                       FINISH_REASON)
# the engine model's one-value inputs an EngineRequest writes, and the Triton datatype of each (the 1.2 template's)
ENGINE_SCALAR_TYPES = {
    INPUT_LENGTHS: "INT32", REQUEST_OUTPUT_LEN: "INT32", END_ID: "INT32", PAD_ID: "INT32", STREAMING: "BOOL",
    EXCLUDE_INPUT_IN_OUTPUT: "BOOL", TEMPERATURE: "FP32", RUNTIME_TOP_K: "INT32", RUNTIME_TOP_P: "FP32",
    LEN_PENALTY: "FP32", REPETITION_PENALTY: "FP32", PRESENCE_PENALTY: "FP32", FREQUENCY_PENALTY: "FP32",
    SEED: "UINT64", MIN_TOKENS: "INT32", RETURN_LOG_PROBS: "BOOL", RETURN_PERF_METRICS: "BOOL",
    RETURN_NUM_INPUT_TOKENS: "BOOL", RETURN_NUM_OUTPUT_TOKENS: "BOOL", STOP: "BOOL"}

# -- preprocessing's and postprocessing's names ---------------------------------------------------------------------
QUERY = "QUERY"
PRE_REQUEST_OUTPUT_LEN = "REQUEST_OUTPUT_LEN"
INPUT_ID = "INPUT_ID"
REQUEST_INPUT_LEN = "REQUEST_INPUT_LEN"
OUT_END_ID = "OUT_END_ID"
OUT_PAD_ID = "OUT_PAD_ID"
STOP_WORDS_IDS = "STOP_WORDS_IDS"
BAD_WORDS_IDS = "BAD_WORDS_IDS"
# preprocessing's input -> the ensemble / BLS input it comes from (what a refusal names)
PREPROCESSING_NAMES = {QUERY: TEXT_INPUT, "DECODER_QUERY": "decoder_text_input",
                       PRE_REQUEST_OUTPUT_LEN: MAX_TOKENS, "BAD_WORDS_DICT": BAD_WORDS,
                       "STOP_WORDS_DICT": STOP_WORDS, "EMBEDDING_BIAS_WORDS": "embedding_bias_words",
                       "EMBEDDING_BIAS_WEIGHTS": "embedding_bias_weights", "END_ID": END_ID, "PAD_ID": PAD_ID,
                       "PROMPT_TABLE_EXTRA_ID": "prompt_table_extra_id", "MIN_TOKENS": MIN_TOKENS,
                       "MIN_LENGTH": MIN_LENGTH, "PROMPT_FORM": PROMPT_FORM,
                       # refused there unless 1: one sequence per request (wire.request_tensors.refuse_many_sequences)
                       "BEAM_WIDTH": BEAM_WIDTH, "NUM_RETURN_SEQUENCES": NUM_RETURN_SEQUENCES}
