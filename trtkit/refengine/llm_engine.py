"""The engine: add_request, step, cancel, stats and generate over the scheduler, KV pool and model."""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trtkit.errors import EngineError
from trtkit.refengine.allocator import keep_freed_memory
from trtkit.refengine.block_manager import BlockManager
from trtkit.refengine.config import EngineConfig
from trtkit.refengine.cpu_features import usable_cores
from trtkit.refengine.engine_counters import EngineCounters
from trtkit.refengine.engine_setup import attention_kernels, compute_dtype, kv_block_count, log_dtype_choice
from trtkit.refengine.guided_decoding import GuidedDecoder
from trtkit.refengine.model_runner import ModelRunner, PreparedStep
from trtkit.refengine.outputs import EngineStats, RequestOutput, SamplingParams
from trtkit.refengine.request_checks import check_request
from trtkit.refengine.sampling import choose_tokens_isolated
from trtkit.refengine.scheduler import ScheduledChunk, Scheduler
from trtkit.refengine.sequence import Sequence
from trtkit.refengine.sequence_progress import append_token, take_output
from trtkit.refengine.thread_binding import bind_compute_threads
from trtkit.refengine.weights import ModelWeights, load_model

log = logging.getLogger(__name__)


@dataclass(slots=True)
class StepPlan:
    chunks: list[ScheduledChunk]
    outputs: list[RequestOutput]  # deltas already due (cancellations since the last step)
    prepared: PreparedStep | None  # None when nothing was scheduled


class LLMEngine:
    def __init__(self, weights: ModelWeights, config: EngineConfig | None = None) -> None:
        self.config = config = config or EngineConfig()
        self.spec = spec = weights.spec
        dtype = compute_dtype(config)
        log_dtype_choice(config, dtype)
        if weights.embed.dtype != dtype:
            raise EngineError(f"the weights are {weights.embed.dtype} but engine.dtype is {config.dtype}; load them "
                              "with load_model(path, dtype) in the engine's dtype, or use LLMEngine.from_pretrained")
        torch.set_num_threads(config.num_threads or usable_cores())
        keep_freed_memory()  # a step's large temporaries reuse the heap instead of page-faulting anew (allocator.py)
        num_blocks = kv_block_count(config, spec, dtype)
        self.block_manager = BlockManager(num_blocks, config.tokens_per_block, enable_reuse=config.enable_kv_cache_reuse)
        self.scheduler = Scheduler(config, self.block_manager)
        self.runner = ModelRunner(weights, num_blocks=num_blocks, block_size=config.tokens_per_block,
                                  max_seq_len=config.max_seq_len, dtype=dtype, kernels=attention_kernels(config, spec))
        self.sequences: dict[str, Sequence] = {}
        self.guided = (GuidedDecoder.from_file(Path(config.xgrammar_tokenizer_info), spec.vocab_size)
                       if config.xgrammar_tokenizer_info else None)
        self._finished_outputs: list[RequestOutput] = []  # cancellations, delivered by the next step()
        self._counters = EngineCounters()
        self._rng = random.Random()
        self._forward_lock = threading.Lock()  # one forward pass at a time over the shared KV pool
        log.info("CPU engine ready: %d KV blocks x %d tokens, policy %s, reuse %s, chunked context %s, %s on %d "
                 "threads, decode attention in %s", num_blocks, config.tokens_per_block, config.scheduler_policy,
                 config.enable_kv_cache_reuse, config.enable_chunked_context, dtype, torch.get_num_threads(),
                 "the native kernel" if self.runner.model.kernels else "torch")

    @classmethod
    def from_pretrained(cls, path: str | Path, config: EngineConfig | None = None) -> LLMEngine:
        """Load a Hugging Face folder or a TensorRT-LLM checkpoint folder (config.json + rank0.safetensors)."""
        config = config or EngineConfig()
        return cls(load_model(path, compute_dtype(config)), config)

    def bind_compute_threads(self) -> list[int] | None:
        """From the thread that will step this engine and do nothing else (EngineLoop's): binds its intra-op threads
        one per core (thread_binding.py); the cores, or None where binding does not apply."""
        return bind_compute_threads(self.runner.model.kernels)

    def add_request(self, prompt_ids: list[int], params: SamplingParams | None = None,
                    request_id: str | None = None, *, grammar: Any = None) -> str:
        """``grammar``: the matcher grammar_for(params) made, when the caller compiled it already."""
        params = params or SamplingParams()
        request_id = request_id if request_id is not None else uuid.uuid4().hex
        self._validate(prompt_ids, params, request_id)
        grammar = grammar if grammar is not None else self.grammar_for(params)
        end_id = params.end_id if params.end_id is not None else self.spec.eos_token_id
        generator = None
        if not params.is_greedy:
            seed = params.seed if params.seed is not None else self._rng.getrandbits(63)
            generator = torch.Generator().manual_seed(seed)
        seq = Sequence(request_id, list(prompt_ids), len(prompt_ids), params,
                       end_id if end_id is None or end_id >= 0 else None, generator, grammar=grammar)
        self.scheduler.add(seq)
        self.sequences[request_id] = seq
        return request_id

    def grammar_for(self, params: SamplingParams) -> Any:
        """The request's grammar matcher (None without a guide): a guide that does not compile is refused up front.
        Safe from any thread (xgrammar's compiler locks its cache), so a caller that serializes add_request can
        compile first, outside its lock, and pass the matcher in: a fresh schema takes milliseconds."""
        if params.guided_decoding_guide_type is None:
            return None
        if self.guided is None:
            raise EngineError("guided decoding is off in this deployment; set serve.guided_decoding: xgrammar in "
                              "the model config and deploy again, or leave guided_decoding_guide_type out")
        return self.guided.matcher(params.guided_decoding_guide_type, params.guided_decoding_guide)

    def _validate(self, prompt_ids: list[int], params: SamplingParams, request_id: str) -> None:
        if request_id in self.sequences:
            raise EngineError(f"request id {request_id!r} is already in flight; use a unique id")
        check_request(prompt_ids, params, self.config, self.spec.vocab_size)

    def step(self) -> list[RequestOutput]:
        """One iteration: schedule, run the model once, sample; returns the deltas of this step.

        A failure that belongs to one request (its sampling, or its share of the model run) finishes only
        that request, with finish_reason "error". Should the step fail as a whole, the final outputs of
        earlier cancellations stay queued for the next call (``drain_finished`` hands them out)."""
        plan = self.begin_step()
        try:
            return self.finish_step(plan, self.compute(plan))
        except BaseException:
            self.requeue_outputs(plan)
            raise

    def begin_step(self) -> StepPlan:
        """Schedule and build the model input. With compute() and finish_step() this is step() in three parts,
        so that a caller serializing access (EngineLoop) can run compute() without holding its lock."""
        chunks = self.scheduler.schedule()
        self._counters.begin_iteration(chunks, time.monotonic())
        prepared = self.runner.prepare(chunks) if chunks else None
        # taken last, so that a failure above leaves the finals of earlier cancellations queued
        outputs, self._finished_outputs = self._finished_outputs, []
        return StepPlan(chunks, outputs, prepared)

    def requeue_outputs(self, plan: StepPlan) -> None:
        """Give a failed step's pending final outputs (earlier cancellations) back, so none is lost."""
        self._finished_outputs[:0] = plan.outputs

    def compute(self, plan: StepPlan) -> torch.Tensor | None:
        """The forward pass of a plan: reads only the plan and the KV slots its chunks were given. Requests
        may be added or cancelled meanwhile (a cancelled one's slots stay unused until the next begin_step).
        None when nothing was scheduled, or when the batched run failed: finish_step then runs each request
        alone, so that only a request at fault fails."""
        if plan.prepared is None:
            return None
        try:
            with self._forward_lock:
                return self.runner.forward(plan.prepared)
        except Exception:
            log.exception("the batched model run failed; running its %d requests one by one", len(plan.chunks))
            return None

    def finish_step(self, plan: StepPlan, logits: torch.Tensor | None) -> list[RequestOutput]:
        """Advance the plan's requests and sample their next tokens; those cancelled since begin_step are skipped."""
        outputs = list(plan.outputs)
        if plan.prepared is None:
            return outputs
        chunks, sampled = plan.chunks, plan.prepared.sampled
        if logits is None:
            chunks, sampled, logits = self._run_one_by_one(plan.chunks, outputs)
        for chunk in chunks:
            if chunk.seq.finish_reason is None:
                chunk.seq.num_computed_tokens += chunk.num_tokens
                self.block_manager.commit_full_blocks(chunk.seq)
        live = [row for row, chunk in enumerate(sampled) if chunk.seq.finish_reason is None]
        seqs = [sampled[row].seq for row in live]
        if logits is not None and len(live) < len(sampled):
            logits = logits[live]
        choices = choose_tokens_isolated(seqs, logits, self.guided)
        now = time.monotonic()
        for seq, choice in zip(seqs, choices, strict=True):
            if isinstance(choice, BaseException):
                outputs.append(self._fail_now(seq, f"sampling failed: {type(choice).__name__}: {choice}"))
                continue
            if append_token(seq, choice[0], choice[1], now, self.config.max_seq_len):
                self._counters.generated_tokens += 1
            outputs.append(take_output(seq))
            if seq.finish_reason is not None:
                self._finish(seq)
        return outputs

    def _run_one_by_one(self, chunks: list[ScheduledChunk], outputs: list[RequestOutput],
                        ) -> tuple[list[ScheduledChunk], list[ScheduledChunk], torch.Tensor | None]:
        """After a failed batched run: each live chunk alone, failing only those whose own run fails."""
        kept, all_sampled, rows = [], [], []
        for chunk in chunks:
            if chunk.seq.finish_reason is not None:  # cancelled since begin_step
                continue
            try:
                with self._forward_lock:
                    sampled, logits = self.runner.run([chunk])
            except Exception as exc:
                outputs.append(self._fail_now(chunk.seq, f"model run failed: {type(exc).__name__}: {exc}"))
                continue
            kept.append(chunk)
            all_sampled += sampled
            rows.append(logits)
        return kept, all_sampled, torch.cat(rows) if rows else None

    def _finish(self, seq: Sequence) -> None:
        self.scheduler.finish(seq)
        del self.sequences[seq.request_id]
        self._counters.finished(seq.finish_reason)

    def _fail_now(self, seq: Sequence, reason: str) -> RequestOutput:
        log.error("request %s failed: %s", seq.request_id, reason)
        seq.finish_reason, seq.error = "error", reason
        self._finish(seq)
        return take_output(seq)

    def fail(self, request_id: str, reason: str, *, queue_output: bool = True) -> bool:
        """Finish a request with finish_reason "error"; its final output comes with the next step() or
        ``drain_finished`` unless ``queue_output`` is False. False when the id is unknown or finished."""
        seq = self.sequences.get(request_id)
        if seq is None:
            return False
        output = self._fail_now(seq, reason)
        if queue_output:
            self._finished_outputs.append(output)
        return True

    def drain_finished(self) -> list[RequestOutput]:
        """The queued final outputs (cancelled or failed requests), without stepping."""
        outputs, self._finished_outputs = self._finished_outputs, []
        return outputs

    def cancel(self, request_id: str) -> bool:
        """Stop a request and free its blocks now; its final output (finish_reason "cancelled") comes with the
        next step(). False when the id is unknown or already finished."""
        seq = self.sequences.get(request_id)
        if seq is None:
            return False
        seq.finish_reason = "cancelled"
        self._finish(seq)
        self._finished_outputs.append(take_output(seq))
        return True

    def prompt_logits(self, token_ids: list[int]) -> torch.Tensor:
        """Next-token logits at every position of token_ids, [n, vocab] float32: for perplexity and quality
        checks. Runs outside the scheduler on free KV blocks, so call it between steps."""
        self._validate(token_ids, SamplingParams(max_tokens=1), "__score__")
        seq = Sequence("__score__", list(token_ids), len(token_ids), SamplingParams(max_tokens=1), None)
        if not self.block_manager.can_append(seq, seq.num_tokens, reserve=self.scheduler.reserved_blocks()):
            raise EngineError("not enough free KV blocks to score this text now; retry when the engine is idle")
        self.block_manager.append_slots(seq, seq.num_tokens)
        try:
            with self._forward_lock:
                _, logits = self.runner.run([ScheduledChunk(seq, 0, seq.num_tokens)], all_positions=True)
        finally:
            self.block_manager.free(seq)
        return logits

    def has_unfinished(self) -> bool:
        return bool(self.sequences) or bool(self._finished_outputs)

    def kv_slot_usage(self) -> tuple[int, int]:
        """(allocated, filled) token slots in the KV pool right now: the numbers behind KV waste."""
        size = self.block_manager.block_size
        unfilled = sum(len(s.block_table) * size - s.num_computed_tokens for s in self.scheduler.running)
        allocated = self.block_manager.num_used_blocks * size
        return allocated, allocated - unfilled

    def kv_reserved_slots(self) -> int:
        """Token slots the scheduler holds back for running requests' growth but has not allocated yet
        (guaranteed_no_evict reserves prompt + max_tokens per request; max_utilization reserves nothing)."""
        return self.scheduler.reserved_blocks() * self.block_manager.block_size

    def stats(self) -> EngineStats:
        return self._counters.stats(self.block_manager, self.scheduler, self.config)

    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams] | None = None,
                 ) -> list[RequestOutput]:
        """Run prompts to completion (feeding the bounded queue as it drains); final outputs in input order."""
        params_list = params if isinstance(params, list) else [params or SamplingParams()] * len(prompts)
        if len(params_list) != len(prompts):
            raise EngineError(f"generate got {len(prompts)} prompts but {len(params_list)} SamplingParams; "
                              "pass one per prompt or a single one for all")
        pending = list(zip(prompts, params_list, strict=True))
        pending.reverse()
        finals: dict[str, RequestOutput] = {}
        order: list[str] = []
        while pending or self.has_unfinished():
            while pending and len(self.scheduler.waiting) < self.config.max_queue_size:
                prompt, p = pending.pop()
                order.append(self.add_request(prompt, p))
            for output in self.step():
                if output.finished:
                    finals[output.request_id] = output
        return [finals[request_id] for request_id in order]
