"""Triton adapter of ``stream_gate`` (installed as <repo>/stream_gate/1/model.py), the GPU ensemble's middle step.

All logic lives in trtkit.triton_models.stream_gate; the engine calls, stream threads, stops and the
response-iterator care are the BLS adapter's (this model is a BLS into ``tensorrt_llm`` too)."""

import triton_python_backend_utils as pb_utils

from trtkit.heap import freeze_startup_heap
from trtkit.tokenizer.detokenizer import DecodeOptions, find_anchor
from trtkit.triton_models import triton_io
from trtkit.triton_models.adapters.tensorrt_llm_bls import FINAL, RetiredIterators
from trtkit.triton_models.adapters.tensorrt_llm_bls import TritonPythonModel as BlsModel
from trtkit.triton_models.preprocessing import load_tokenizer
from trtkit.triton_models.stream_gate import GateCalls, StreamGate
from trtkit.triton_models.stream_threads import StreamThreads


class TritonPythonModel(BlsModel):
    def initialize(self, args):
        params = triton_io.parameters(args)
        self.decoupled = True  # the ensemble's streaming step
        self.engine_decoupled = True
        self.engine_name = params.get("tensorrt_llm_model_name") or "tensorrt_llm"
        self.engine_outputs = [name for name in params["engine_outputs"].split(",") if name]
        tokenizer = load_tokenizer(params["tokenizer_dir"])
        options = DecodeOptions(skip_special_tokens=triton_io.flag(params, "skip_special_tokens", True))
        self.gate = StreamGate(tokenizer, find_anchor(tokenizer), tokens_per_block=int(params["tokens_per_block"]),
                               options=options)
        self.streams = StreamThreads()
        self.retired = RetiredIterators()
        freeze_startup_heap()

    def _stream_one(self, request):
        sender = request.get_response_sender()
        requested = triton_io.requested_outputs(request)  # never let the stub prune a response
        state = {"final": False}

        def send(outputs, final):
            state["final"] = state["final"] or final
            sender.send(triton_io.response(pb_utils, outputs, requested), flags=FINAL if final else 0)

        engine, stop_engine, engine_id = self._engine_of(request.request_id())
        try:
            self.gate.run(triton_io.inputs_of(request), GateCalls(engine, send, sender.is_cancelled, stop_engine,
                                                                  engine_id))
            if not state["final"]:
                sender.send(flags=FINAL)
        except Exception as exc:  # answers this request only
            if not state["final"]:
                sender.send(triton_io.error_response(pb_utils, exc), flags=FINAL)
