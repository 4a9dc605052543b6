"""Triton adapter of ``postprocessing`` (installed as <repo>/postprocessing/1/model.py).

Ensemble cancellation (tritonserver 2.51): when a streaming client cancels, the ensemble marks every
step it schedules afterwards as cancelled, but never the running ``tensorrt_llm`` step
(core#263, server#6739). So a cancelled request here means "the client of this stream went away":
the adapter stops the engine request that carries the same Triton request id (the template's ``stop``
input, as the BLS does) and still answers with a success. An error (``TritonError.CANCELLED``, as the
Python backend docs advise) would make 2.51's ensemble scheduler drop the rest of the engine's stream,
final flag included, and keep the ensemble request in flight forever (fixed upstream in core#466)."""

import triton_python_backend_utils as pb_utils

from trtkit.heap import freeze_startup_heap
from trtkit.tokenizer.detokenizer import DecodeOptions, find_anchor
from trtkit.triton_models import triton_io
from trtkit.triton_models.postprocessing import Postprocessor
from trtkit.triton_models.preprocessing import load_tokenizer
from trtkit.wire import names as n
from trtkit.wire.stop_request import STOP_TENSORS


class TritonPythonModel:
    def initialize(self, args):
        params = triton_io.parameters(args)
        tokenizer = load_tokenizer(params["tokenizer_dir"])
        options = DecodeOptions(skip_special_tokens=triton_io.flag(params, "skip_special_tokens", True))
        self.post = Postprocessor(tokenizer, find_anchor(tokenizer), options)
        self.engine_name = params.get("tensorrt_llm_model_name") or "tensorrt_llm"
        self.engine_decoupled = triton_io.flag(params, "engine_decoupled", True)
        freeze_startup_heap()

    def execute(self, requests):
        responses = []
        for request in requests:
            if request.is_cancelled():
                self._stop_engine(_engine_key(request) or request.request_id())
            try:
                responses.append(triton_io.response(pb_utils, self.post.run(triton_io.inputs_of(request))))
            except Exception as exc:
                responses.append(triton_io.error_response(pb_utils, exc))
        return responses

    def _stop_engine(self, request_id):
        """Cancel the engine request of a cancelled ensemble stream, found by its key or its Triton id."""
        if not request_id:
            return
        request = pb_utils.InferenceRequest(model_name=self.engine_name, requested_output_names=[n.OUTPUT_IDS],
                                            inputs=triton_io.to_tensors(pb_utils, STOP_TENSORS), request_id=request_id)
        try:
            for _ in request.exec(decoupled=True) if self.engine_decoupled else [request.exec()]:
                pass
        except Exception:  # already stopped (its responses in flight still come here) or ended on its own
            pass


def _engine_key(request):
    """The CPU engine's request key (``cpu_request_key``, wired by the CPU ensemble); "" when absent."""
    tensor = pb_utils.get_input_tensor_by_name(request, "ENGINE_REQUEST_KEY")
    return "" if tensor is None else triton_io.text_of(tensor.as_numpy())
