"""Triton adapter of ``postprocessing`` (installed as <repo>/postprocessing/1/model.py)."""

import triton_python_backend_utils as pb_utils

from trtkit.triton_models import triton_io
from trtkit.triton_models.detokenizer import DecodeOptions, find_anchor
from trtkit.triton_models.postprocessing import Postprocessor
from trtkit.triton_models.preprocessing import load_tokenizer


class TritonPythonModel:
    def initialize(self, args):
        params = triton_io.parameters(args)
        tokenizer = load_tokenizer(params["tokenizer_dir"])
        options = DecodeOptions(skip_special_tokens=triton_io.flag(params, "skip_special_tokens", True))
        self.post = Postprocessor(tokenizer, find_anchor(tokenizer), options)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(triton_io.response(pb_utils, self.post.run(triton_io.inputs_of(request))))
            except Exception as exc:
                responses.append(triton_io.error_response(pb_utils, exc))
        return responses
