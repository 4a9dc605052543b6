"""Triton adapter of ``preprocessing`` (installed as <repo>/preprocessing/1/model.py).

All logic lives in trtkit.triton_models.preprocessing; this file only moves tensors."""

import numpy as np
import triton_python_backend_utils as pb_utils

from trtkit.triton_models import triton_io
from trtkit.triton_models.preprocessing import Limits, Preprocessor, load_tokenizer


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
            done = self.pre.run(triton_io.inputs_of(request))
            outputs = {
                "INPUT_ID": np.array([done.input_ids], dtype=np.int32),
                "REQUEST_INPUT_LEN": np.array([[len(done.input_ids)]], dtype=np.int32),
                "REQUEST_OUTPUT_LEN": np.array([[done.max_tokens]], dtype=np.int32),
                "STOP_WORDS_IDS": done.stop_words[np.newaxis], "BAD_WORDS_IDS": done.bad_words[np.newaxis],
                "OUT_END_ID": np.array([[done.end_id]], dtype=np.int32),
                "OUT_PAD_ID": np.array([[done.pad_id]], dtype=np.int32),
                "OUT_MIN_TOKENS": np.array([[done.min_tokens]], dtype=np.int32),
            }
            return triton_io.response(pb_utils, outputs)
        except Exception as exc:  # every failure answers this request only
            return triton_io.error_response(pb_utils, exc)
