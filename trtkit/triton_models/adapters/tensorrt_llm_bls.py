"""Triton adapter of ``tensorrt_llm_bls`` (installed as <repo>/tensorrt_llm_bls/1/model.py).

All logic lives in trtkit.triton_models.bls; this file makes the BLS calls and sends responses.
Decoupled requests each run on their own thread, so one instance serves many streams at once."""

import collections
import contextlib
import threading
import time
import uuid

import triton_python_backend_utils as pb_utils

from trtkit.heap import freeze_startup_heap
from trtkit.tokenizer.detokenizer import DecodeOptions, find_anchor
from trtkit.triton_models import triton_io
from trtkit.triton_models.bls import Bls, BlsCalls
from trtkit.triton_models.preprocessing import load_tokenizer
from trtkit.triton_models.stream_threads import StreamThreads
from trtkit.wire import names as n
from trtkit.wire.stop_request import STOP_TENSORS

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
PRE_OUTPUTS = [n.INPUT_ID, n.REQUEST_INPUT_LEN, n.PRE_REQUEST_OUTPUT_LEN, n.STOP_WORDS_IDS, n.BAD_WORDS_IDS,
               n.OUT_END_ID, n.OUT_PAD_ID]
ENGINE_OUTPUTS = [n.OUTPUT_IDS, n.SEQUENCE_LENGTH, n.CUM_LOG_PROBS, n.OUTPUT_LOG_PROBS, n.NUM_INPUT_TOKENS,
                  n.NUM_OUTPUT_TOKENS, n.KV_CACHE_REUSED_BLOCKS, n.BATCH_INDEX]
CPU_EXTRA_OUTPUTS = [n.NUM_CACHED_TOKENS, n.FINISH_REASON, n.CPU_REQUEST_KEY]
ENGINE_KEY = n.CPU_REQUEST_KEY


class RetiredIterators:
    """Finished BLS response iterators, kept alive for a while before Python drops them.

    Reading an iterator's final response queues its removal from the stub's response-iterator map, done
    later on a stub thread. If Python dropped its own reference first, the map's removal would destroy
    the iterator on that thread without the GIL, freeing Python objects: the stub crashes (a segfault
    in libpython, seen under the soak's load when every early-ended stream was read to its end). Kept
    here for KEEP_S (the stub thread takes well under a millisecond per message), the map lets go first
    and the iterator dies in a Python thread that holds the GIL (python_backend pb_stub.cc SendCleanupId,
    pb_response_iterator.cc ~ResponseIterator). What is kept is bounded by KEEP_S of traffic."""

    KEEP_S = 1.0

    def __init__(self):
        self.lock = threading.Lock()
        self.kept = collections.deque()

    def retire(self, responses):
        now = time.monotonic()
        with self.lock:
            self.kept.append((now, responses))
            while self.kept and now - self.kept[0][0] > self.KEEP_S:
                self.kept.popleft()


class TritonPythonModel:
    def initialize(self, args):
        params = triton_io.parameters(args)
        self.decoupled = triton_io.is_decoupled(args)
        self.engine_name = params.get("tensorrt_llm_model_name") or "tensorrt_llm"
        self.engine_outputs = ENGINE_OUTPUTS + (CPU_EXTRA_OUTPUTS if triton_io.flag(params, "engine_extras", False)
                                                else [])
        self.engine_decoupled = triton_io.flag(params, "engine_decoupled", self.decoupled)
        tokenizer = load_tokenizer(params["tokenizer_dir"])
        options = DecodeOptions(skip_special_tokens=triton_io.flag(params, "skip_special_tokens", True))
        self.bls = Bls(tokenizer, find_anchor(tokenizer), tokens_per_block=int(params["tokens_per_block"]),
                       decoupled=self.decoupled, options=options,
                       per_response_counts=triton_io.flag(params, "engine_per_response_counts", False))
        self.streams = StreamThreads()
        self.retired = RetiredIterators()
        freeze_startup_heap()

    def _preprocess(self, inputs):
        request = pb_utils.InferenceRequest(model_name="preprocessing", requested_output_names=PRE_OUTPUTS,
                                            inputs=triton_io.to_tensors(pb_utils, inputs))
        return triton_io.response_outputs(pb_utils, request.exec())

    def _engine(self, inputs, stream, request_id=""):
        request = pb_utils.InferenceRequest(model_name=self.engine_name, requested_output_names=self.engine_outputs,
                                            inputs=triton_io.to_tensors(pb_utils, inputs), request_id=request_id)
        if not self.engine_decoupled:
            yield triton_io.response_outputs(pb_utils, request.exec())
            return
        responses = request.exec(decoupled=True)
        finished = False
        try:
            for resp in responses:
                yield triton_io.response_outputs(pb_utils, resp)
            finished = True
        finally:
            if not finished:
                # Read on to the final response even when the BLS is done early (client cancel, our stop string:
                # the engine was told to stop, so it ends soon). The stub keeps a response iterator, with every
                # response it received, in its map until its final response has been read: one left early is
                # never freed (python_backend src/pb_stub.cc response_iterator_map_, pb_response_iterator.cc).
                for _ in responses:
                    pass
            self.retired.retire(responses)

    def execute(self, requests):
        if not self.decoupled:
            return [self._answer_one(request) for request in requests]
        for request in requests:
            self.streams.start(self._stream_one, request)
        return None

    def _answer_one(self, request):
        box = {}
        engine, _, _ = self._engine_of(request.request_id())  # one complete answer: nothing left to stop
        calls = BlsCalls(self._preprocess, engine, lambda outputs, final: box.update(outputs=outputs),
                         lambda: False)
        try:
            self.bls.run(triton_io.inputs_of(request), calls)
            if "outputs" not in box:  # never an empty success
                raise RuntimeError("the request ended without an answer; retry it")
            return triton_io.response(pb_utils, box["outputs"])
        except Exception as exc:
            return triton_io.error_response(pb_utils, exc)

    def _stream_one(self, request):
        sender = request.get_response_sender()
        requested = triton_io.requested_outputs(request)  # see there: never let the stub prune a response
        state = {"final": False}

        def send(outputs, final):
            state["final"] = state["final"] or final
            sender.send(triton_io.response(pb_utils, outputs, requested), flags=FINAL if final else 0)

        engine, stop_engine, _ = self._engine_of(request.request_id())
        calls = BlsCalls(self._preprocess, engine, send, sender.is_cancelled, stop_engine)
        try:
            self.bls.run(triton_io.inputs_of(request), calls)
            if not state["final"]:
                sender.send(flags=FINAL)
        except Exception as exc:  # answers this request only
            if not state["final"]:
                sender.send(triton_io.error_response(pb_utils, exc), flags=FINAL)

    def _engine_of(self, request_id):
        """The engine call of one client request, how to stop it, and the id it carries.

        The engine request carries the client's request id, so a client's `stop` to the engine with that id
        ends this request as it ends an ensemble request (trtkit/wire/stop_request.py). Our own stops (client gone,
        stop string) use the engine's key for the request where the CPU engine sends one, so a request that
        shares its id with another never stops that other."""
        engine_id = request_id or uuid.uuid4().hex
        target = {"id": engine_id}

        def engine(inputs, stream):
            single = len(inputs[n.INPUT_IDS]) == 1  # a batched request is stopped whole, by its id
            with contextlib.closing(self._engine(inputs, stream, engine_id)) as responses:
                for outputs in responses:
                    key = outputs.pop(ENGINE_KEY, None)
                    if single and key is not None:
                        target["id"] = triton_io.text_of(key) or engine_id
                    yield outputs

        return engine, lambda: self._stop_engine(target["id"]), engine_id

    def _stop_engine(self, engine_id):
        """The template's `stop` input: cancels the engine request that carries this id (or engine key)."""
        request = pb_utils.InferenceRequest(model_name=self.engine_name, requested_output_names=[n.OUTPUT_IDS],
                                            inputs=triton_io.to_tensors(pb_utils, STOP_TENSORS), request_id=engine_id)
        try:
            if not self.engine_decoupled:
                request.exec()
                return
            responses = request.exec(decoupled=True)
            for _ in responses:
                pass
            self.retired.retire(responses)
        except Exception:  # the engine request may have finished on its own meanwhile
            pass

    def finalize(self):
        self.streams.wait()  # bounded in all: the unload fits tritonserver's exit timeout; stuck streams are logged
