"""Triton adapter of the Python ``tensorrt_llm`` model (installed as <repo>/tensorrt_llm/1/model.py).

It answers the tensors of TensorRT-LLM's C++ backend with an engine behind a port: trtkit's reference engine
(its own loop), or, with parameter ``llm_api_engine``, TensorRT-LLM's LLM API (``tensorrt_llm.LLM``, the
PyTorch backend, or the reference engine's LLM facade on CPU). All logic lives in
trtkit.triton_models.engine_model / engine_host / llm_api_host / metrics; this file only talks to Triton."""

import time

import triton_python_backend_utils as pb_utils

from trtkit.heap import freeze_startup_heap
from trtkit.tokenizer.detokenizer import find_anchor
from trtkit.triton_models import triton_io
from trtkit.triton_models.engine_host import (
    CancellationWatch,
    StatsPublisher,
    StreamSink,
    WaitingSink,
    start_engine,
)
from trtkit.triton_models.engine_model import EngineModel
from trtkit.triton_models.metrics import EngineMetrics
from trtkit.triton_models.preprocessing import load_tokenizer
from trtkit.wire import names as n

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
BUCKETS = [10.0, 50.0, 100.0, 500.0, 1000.0]


def _family(name, description, kind):
    # MetricFamily is attached to pb_utils only once the stub runs, not at import time
    kinds = {"gauge": "GAUGE", "counter": "COUNTER", "histogram": "HISTOGRAM"}
    code = getattr(pb_utils.MetricFamily, kinds[kind], None)
    if code is None:
        raise RuntimeError(f"metric kind {kind} unsupported by this Python backend")
    family = pb_utils.MetricFamily(name=name, description=description, kind=code)
    if kind == "histogram":
        return lambda labels: family.Metric(labels=labels, buckets=BUCKETS)
    return lambda labels: family.Metric(labels=labels)


class TritonPythonModel:
    def initialize(self, args):
        params = triton_io.parameters(args)
        self.decoupled = triton_io.is_decoupled(args)
        if params.get("llm_api_engine"):
            from trtkit.triton_models.llm_api_host import start_llm_api

            self.engine = start_llm_api(params, args.get("model_instance_name", ""))
        else:
            self.engine = start_engine(params)
        tokenizer = load_tokenizer(params["tokenizer_dir"])
        self.model = EngineModel(self.engine, tokenizer, find_anchor(tokenizer),
                                 tokens_per_block=int(params.get("cpu_tokens_per_block")
                                                      or params["tokens_per_block"]),
                                 exclude_input_default=triton_io.flag(params, n.EXCLUDE_INPUT_IN_OUTPUT, True),
                                 decoupled=self.decoupled,
                                 cpp_responses=triton_io.flag(params, "cpu_cpp_responses", False))
        self.metrics = EngineMetrics(_family, args["model_name"], str(args["model_version"]),
                                     int(params.get("cpu_max_batch_size") or params.get("max_batch_size") or 1))
        period = int(params.get("stats_check_period_ms") or 100) / 1000
        self.publisher = StatsPublisher(self.engine.stats, self.metrics.publish, period)
        self.publisher.start()
        # LLM API: a queued request sends nothing, so ask Triton whether its client left, as upstream's LLM-API
        # model does (the CPU engine's loop sees its requests every step and needs no watch)
        self.watch = CancellationWatch(self.model.sweep_cancelled,
                                       int(params.get("cancellation_check_period_ms") or 100) / 1000)
        if params.get("llm_api_engine"):
            self.watch.start()
        # a non-decoupled request waits for its one answer at most this long (never forever)
        self.request_timeout_s = float(params.get("cpu_request_timeout_s") or 600)
        freeze_startup_heap()  # full collections skip torch, the weights' objects and the tokenizer

    def _observe(self, outputs):
        counts = [outputs.get(name) for name in (n.NUM_INPUT_TOKENS, n.NUM_OUTPUT_TOKENS)]
        if all(c is not None for c in counts):  # the cpp_responses test switch may leave them out
            self.metrics.observe_request(int(counts[0].item()), int(counts[1].item()))

    def execute(self, requests):
        if self.decoupled:
            for request in requests:
                self._submit_streaming(request)
            return None
        waiting = []
        for request in requests:
            sink = WaitingSink(self._observe)
            try:
                rid = self.model.submit(triton_io.inputs_of(request), sink, None)
                waiting.append((sink, rid, None))
            except Exception as exc:
                waiting.append((None, "", triton_io.error_response(pb_utils, exc)))
        deadline = time.monotonic() + self.request_timeout_s
        return [error if error is not None else self._answer(sink, rid, deadline) for sink, rid, error in waiting]

    def _answer(self, sink, rid, deadline):
        if not rid:  # a `stop` request: it is answered once the live request is cancelled
            return triton_io.response(pb_utils, {})
        failure = sink.wait(max(0.0, deadline - time.monotonic()))
        if failure is None:
            return triton_io.response(pb_utils, sink.outputs)
        self.model.port.cancel(rid)  # a request nobody waits for any more frees its blocks
        return triton_io.error_response(pb_utils, RuntimeError(failure))

    def _submit_streaming(self, request):
        sender = request.get_response_sender()
        requested = triton_io.requested_outputs(request)  # see there: never let the stub prune a response

        def send(outputs, final):
            flags = FINAL if final else 0
            if outputs is None:
                sender.send(flags=FINAL)
            else:
                sender.send(triton_io.response(pb_utils, outputs, requested), flags=flags)

        def send_error(message):
            sender.send(triton_io.error_response(pb_utils, RuntimeError(message)), flags=FINAL)

        sink = StreamSink(send, sender.is_cancelled, self._observe, send_error)
        try:
            self.model.submit(triton_io.inputs_of(request), sink, None, request.request_id())
        except Exception as exc:  # answers this request only
            sender.send(triton_io.error_response(pb_utils, exc), flags=FINAL)

    def finalize(self):
        self.watch.close()
        self.publisher.close()
        self.engine.shutdown()
        # Drop the custom metrics while the stub can still delete them: left to interpreter exit, each
        # Metric's destructor runs after the stub freed its shared memory and segfaults (python_backend
        # r24.10 src/metric.cc Metric::Clear -> SaveToSharedMemory on a null pool).
        self.publisher = self.metrics = None

