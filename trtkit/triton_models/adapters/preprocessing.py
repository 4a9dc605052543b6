"""Triton adapter of ``preprocessing`` (installed as <repo>/preprocessing/1/model.py).

All logic lives in trtkit.triton_models.preprocessing; this file only moves tensors."""

import numpy as np
import triton_python_backend_utils as pb_utils

from trtkit.triton_models import triton_io
from trtkit.triton_models.preprocessing import Limits, Preprocessor, load_tokenizer
from trtkit.triton_models.requests import InvalidRequest, min_tokens_of, reject_unsupported

UNSUPPORTED = ("DECODER_QUERY", "EMBEDDING_BIAS_WORDS", "EMBEDDING_BIAS_WEIGHTS", "PROMPT_TABLE_EXTRA_ID")


class TritonPythonModel:
    def initialize(self, args):
        params = triton_io.parameters(args)
        self.pre = Preprocessor(load_tokenizer(params["tokenizer_dir"]),
                                Limits(int(params["max_input_len"]), int(params["max_seq_len"])),
                                chat_template=triton_io.flag(params, "chat_template", False),
                                add_special_tokens=triton_io.flag(params, "add_special_tokens", True))

    def execute(self, requests):
        return [self._one(request) for request in requests]

    def _one(self, request):
        try:
            inputs = triton_io.inputs_of(request)
            rows = inputs["QUERY"].shape[0]
            if rows != 1:
                raise InvalidRequest(f"text_input: batch of {rows}; send one prompt per request")
            reject_unsupported(inputs, UNSUPPORTED, "trtkit's text-only preprocessing; leave it out")
            done = self.pre.run(inputs)
            min_tokens = min_tokens_of(inputs, "MIN_TOKENS", "MIN_LENGTH")
            outputs = {
                "INPUT_ID": np.array([done.input_ids], dtype=np.int32),
                "REQUEST_INPUT_LEN": np.array([[len(done.input_ids)]], dtype=np.int32),
                "REQUEST_OUTPUT_LEN": np.array([[done.max_tokens]], dtype=np.int32),
                "STOP_WORDS_IDS": done.stop_words[np.newaxis], "BAD_WORDS_IDS": done.bad_words[np.newaxis],
                "OUT_END_ID": np.array([[done.end_id]], dtype=np.int32),
                "OUT_PAD_ID": np.array([[done.pad_id]], dtype=np.int32),
                "OUT_MIN_TOKENS": np.array([[min_tokens]], dtype=np.int32),
            }
            return triton_io.response(pb_utils, outputs)
        except Exception as exc:  # every failure answers this request only
            return triton_io.error_response(pb_utils, exc)
