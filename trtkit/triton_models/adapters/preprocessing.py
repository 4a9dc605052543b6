"""Triton adapter of ``preprocessing`` (installed as <repo>/preprocessing/1/model.py).

All logic lives in trtkit.triton_models.preprocessing; this file only moves tensors."""

import triton_python_backend_utils as pb_utils

from trtkit.heap import freeze_startup_heap
from trtkit.triton_models import triton_io
from trtkit.triton_models.preprocessing import Limits, Preprocessor, batch_tensors, load_tokenizer


class TritonPythonModel:
    def initialize(self, args):
        params = triton_io.parameters(args)
        self.pre = Preprocessor(load_tokenizer(params["tokenizer_dir"]),
                                Limits(int(params["max_input_len"]), int(params["max_seq_len"])),
                                chat_template=triton_io.flag(params, "chat_template", False),
                                add_special_tokens=triton_io.flag(params, "add_special_tokens", True))
        freeze_startup_heap()

    def execute(self, requests):
        return [self._one(request) for request in requests]

    def _one(self, request):
        try:
            outputs = batch_tensors(self.pre.run_batch(triton_io.inputs_of(request)))
            return triton_io.response(pb_utils, outputs)
        except Exception as exc:  # every failure answers this request only
            return triton_io.error_response(pb_utils, exc)
