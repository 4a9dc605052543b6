"""The engine: add_request, step, cancel, stats and generate over the scheduler, KV pool and model."""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import torch

from trtkit.errors import EngineError, InvalidInputError
from trtkit.refengine.allocator import keep_freed_memory
from trtkit.refengine.block_manager import BlockManager
from trtkit.refengine.config import EngineConfig
from trtkit.refengine.cpu_features import native_bf16_flags, usable_cores
from trtkit.refengine.model import KVCache
from trtkit.refengine.model_runner import ModelRunner, PreparedStep
from trtkit.refengine.outputs import EngineStats, FinishReason, RequestOutput, SamplingParams
from trtkit.refengine.paged_attention import (
    AttentionKernels,
    KernelUnavailable,
    load_kernel,
    unsupported_shape,
)
from trtkit.refengine.sampling import choose_tokens
from trtkit.refengine.scheduler import ScheduledChunk, Scheduler
from trtkit.refengine.sequence import Sequence
from trtkit.refengine.weights import ModelSpec, ModelWeights, load_model
from trtkit.sampling_ranges import check_token_id

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Counters:
    iteration: int = 0
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    scheduled_tokens: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    reused_tokens: int = 0
    last_scheduled: int = 0
    last_context: int = 0


def _compute_dtype(config: EngineConfig) -> torch.dtype:
    if config.dtype == "float32":
        return torch.float32
    if not native_bf16_flags():
        raise EngineError("serve.cpu_dtype: bf16 needs a CPU with native bf16 arithmetic (AVX512-BF16 or AMX); "
                          "this one has neither, so bf16 would run slower than fp32: set serve.cpu_dtype: fp32")
    return torch.bfloat16


def _attention_kernels(config: EngineConfig, spec: ModelSpec) -> AttentionKernels | None:
    """The native kernels (decode and prompt attention, decode-size projections) for attention native/auto; None for
    torch (or auto without a compiler)."""
    if config.attention == "torch":
        return None
    try:
        reason = unsupported_shape(spec.num_heads, spec.num_kv_heads, spec.head_dim)
        if reason is not None:
            raise KernelUnavailable(reason)
        return load_kernel()
    except KernelUnavailable as error:
        if config.attention == "native":
            raise EngineError(f"serve.cpu_attention: native: {error}") from error
        log.warning("attention and projections run in torch (slower): %s", error)
        return None


@dataclass(slots=True)
class StepPlan:
    chunks: list[ScheduledChunk]
    outputs: list[RequestOutput]  # deltas already due (cancellations since the last step)
    prepared: PreparedStep | None  # None when nothing was scheduled


class LLMEngine:
    def __init__(self, weights: ModelWeights, config: EngineConfig | None = None) -> None:
        self.config = config = config or EngineConfig()
        self.spec = spec = weights.spec
        dtype = _compute_dtype(config)
        if weights.embed.dtype != dtype:
            raise EngineError(f"the weights are {weights.embed.dtype} but engine.dtype is {config.dtype}; load them "
                              "with load_model(path, dtype) in the engine's dtype, or use LLMEngine.from_pretrained")
        torch.set_num_threads(config.num_threads or usable_cores())
        keep_freed_memory()  # a step's large temporaries reuse the heap instead of page-faulting anew (allocator.py)
        num_blocks = config.num_blocks_for(KVCache.bytes_per_token(spec.num_layers, spec.num_kv_heads,
                                                                   spec.head_dim, dtype))
        blocks_per_seq = -(-config.max_seq_len // config.tokens_per_block)
        if num_blocks < blocks_per_seq:
            raise EngineError(f"the KV cache holds {num_blocks} blocks of {config.tokens_per_block} tokens, fewer "
                              f"than one max_seq_len={config.max_seq_len} sequence needs ({blocks_per_seq}); raise "
                              "serve.cpu_kv_cache_mb (or max_tokens_in_paged_kv_cache) or lower build.max_seq_len")
        self.block_manager = BlockManager(num_blocks, config.tokens_per_block, enable_reuse=config.enable_kv_cache_reuse)
        self.scheduler = Scheduler(config, self.block_manager)
        self.runner = ModelRunner(weights, num_blocks=num_blocks, block_size=config.tokens_per_block,
                                  max_seq_len=config.max_seq_len, dtype=dtype, kernels=_attention_kernels(config, spec))
        self.sequences: dict[str, Sequence] = {}
        self._finished_outputs: list[RequestOutput] = []  # cancellations, delivered by the next step()
        self._counters = _Counters()
        self._rng = random.Random()
        self._forward_lock = threading.Lock()  # one forward pass at a time over the shared KV pool
        log.info("CPU engine ready: %d KV blocks x %d tokens, policy %s, reuse %s, chunked context %s, %s on %d "
                 "threads, decode attention in %s", num_blocks, config.tokens_per_block, config.scheduler_policy,
                 config.enable_kv_cache_reuse, config.enable_chunked_context, config.dtype, torch.get_num_threads(),
                 "the native kernel" if self.runner.model.kernels else "torch")

    @classmethod
    def from_pretrained(cls, path: str | Path, config: EngineConfig | None = None) -> LLMEngine:
        """Load a Hugging Face folder or a TensorRT-LLM checkpoint folder (config.json + rank0.safetensors)."""
        config = config or EngineConfig()
        return cls(load_model(path, _compute_dtype(config)), config)

    def add_request(self, prompt_ids: list[int], params: SamplingParams | None = None,
                    request_id: str | None = None) -> str:
        params = params or SamplingParams()
        request_id = request_id if request_id is not None else uuid.uuid4().hex
        self._validate(prompt_ids, params, request_id)
        end_id = params.end_id if params.end_id is not None else self.spec.eos_token_id
        generator = None
        if not params.is_greedy:
            seed = params.seed if params.seed is not None else self._rng.getrandbits(63)
            generator = torch.Generator().manual_seed(seed)
        seq = Sequence(request_id, list(prompt_ids), len(prompt_ids), params,
                       end_id if end_id is None or end_id >= 0 else None, generator)
        self.scheduler.add(seq)
        self.sequences[request_id] = seq
        return request_id

    def _validate(self, prompt_ids: list[int], params: SamplingParams, request_id: str) -> None:
        config, vocab = self.config, self.spec.vocab_size
        if request_id in self.sequences:
            raise EngineError(f"request id {request_id!r} is already in flight; use a unique id")
        if not prompt_ids:
            raise EngineError("the prompt is empty; send at least one token")
        if len(prompt_ids) > config.max_input_len:
            raise EngineError(f"prompt has {len(prompt_ids)} tokens, more than max_input_len={config.max_input_len}; "
                              "shorten it or rebuild with a larger build.max_input_len")
        if len(prompt_ids) + params.max_tokens > config.max_seq_len:
            raise EngineError(f"prompt ({len(prompt_ids)}) + max_tokens ({params.max_tokens}) exceeds max_seq_len="
                              f"{config.max_seq_len}; lower max_tokens")
        if min(prompt_ids) < 0 or max(prompt_ids) >= vocab:
            raise EngineError(f"prompt token ids must be in [0, {vocab}); check the tokenizer matches the model")
        self._validate_ids(params, vocab)

    @staticmethod
    def _validate_ids(params: SamplingParams, vocab: int) -> None:
        """Every id a request names must index the vocabulary, or sampling would fail mid-step."""
        named = [("end_id", params.end_id)] if params.end_id is not None and params.end_id >= 0 else []
        named += [("pad_id", params.pad_id)] if params.pad_id is not None else []
        named += [(f"{name}[{i}]", token) for name, words in (("stop_words", params.stop_token_ids),
                                                               ("bad_words", params.bad_token_ids))
                  for i, word in enumerate(words) for token in word]
        for name, token in named:
            try:
                check_token_id(name, int(token), vocab)
            except InvalidInputError as exc:
                raise EngineError(str(exc)) from exc

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
        counters = self._counters
        counters.iteration += 1
        counters.last_scheduled = len(chunks)
        counters.last_context = sum(1 for c in chunks if c.num_tokens > 1 or c.start == 0)
        now = time.monotonic()
        for chunk in chunks:
            self._mark_scheduled(chunk, now)
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
        choices = self._choose_isolated(seqs, logits)
        now = time.monotonic()
        for seq, choice in zip(seqs, choices, strict=True):
            if isinstance(choice, BaseException):
                outputs.append(self._fail_now(seq, f"sampling failed: {type(choice).__name__}: {choice}"))
                continue
            self._append_token(seq, choice[0], choice[1], now)
            outputs.append(self._output(seq))
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

    @staticmethod
    def _choose_isolated(seqs: list[Sequence], logits: torch.Tensor | None,
                         ) -> list[tuple[int, float | None] | BaseException]:
        if not seqs or logits is None:
            return []
        try:
            return list(zip(*choose_tokens(seqs, logits), strict=True))
        except Exception:  # find the request(s) at fault: every other one still gets its token
            log.exception("sampling failed for the batch; sampling its %d requests one by one", len(seqs))
        choices: list[tuple[int, float | None] | BaseException] = []
        for seq, row in zip(seqs, logits, strict=True):
            try:
                tokens, log_probs = choose_tokens([seq], row.unsqueeze(0))
                choices.append((tokens[0], log_probs[0]))
            except Exception as exc:
                choices.append(exc)
        return choices

    def _mark_scheduled(self, chunk: ScheduledChunk, now: float) -> None:
        seq = chunk.seq
        self._counters.scheduled_tokens += chunk.num_tokens
        if seq.first_scheduled_time is None:
            seq.first_scheduled_time = now
            self._counters.prompt_tokens += seq.num_prompt_tokens
            self._counters.reused_tokens += seq.num_reused_tokens

    def _append_token(self, seq: Sequence, token: int, log_prob: float | None, now: float) -> None:
        if seq.first_token_time is None:
            seq.first_token_time = now
        seq.last_token_time = now
        if seq.end_id is not None and token == seq.end_id:
            seq.finish_reason = "end_id"
            return
        seq.token_ids.append(token)
        self._counters.generated_tokens += 1
        if log_prob is not None:
            seq.cum_log_prob += log_prob
            seq.pending_log_probs.append(log_prob)
        seq.finish_reason = self._stop_reason(seq)

    def _stop_reason(self, seq: Sequence) -> FinishReason | None:
        output = seq.token_ids[seq.num_prompt_tokens:]
        for stop in seq.params.stop_token_ids:
            if len(output) >= len(stop) and output[len(output) - len(stop):] == stop:
                return "stop"
        if len(output) >= seq.params.max_tokens or seq.num_tokens >= self.config.max_seq_len:
            return "length"
        return None

    def _output(self, seq: Sequence) -> RequestOutput:
        new_tokens = seq.token_ids[seq.num_prompt_tokens + seq.num_delivered_tokens:]
        seq.num_delivered_tokens += len(new_tokens)
        log_probs, seq.pending_log_probs = seq.pending_log_probs, []
        wants_log_probs = seq.params.return_log_probs
        return RequestOutput(
            request_id=seq.request_id, new_token_ids=new_tokens,
            output_token_ids=list(seq.output_token_ids if seq.params.exclude_input_in_output else seq.token_ids),
            finished=seq.finish_reason is not None, finish_reason=seq.finish_reason,
            num_prompt_tokens=seq.num_prompt_tokens, num_reused_tokens=seq.num_reused_tokens,
            new_log_probs=log_probs if wants_log_probs else None,
            cum_log_prob=seq.cum_log_prob if wants_log_probs else None,
            arrival_time=seq.arrival_time, first_scheduled_time=seq.first_scheduled_time,
            first_token_time=seq.first_token_time, last_token_time=seq.last_token_time, error=seq.error)

    def _finish(self, seq: Sequence) -> None:
        self.scheduler.finish(seq)
        del self.sequences[seq.request_id]
        if seq.finish_reason == "cancelled":
            self._counters.cancelled += 1
        elif seq.finish_reason == "error":
            self._counters.failed += 1
        else:
            self._counters.completed += 1

    def _fail_now(self, seq: Sequence, reason: str) -> RequestOutput:
        log.error("request %s failed: %s", seq.request_id, reason)
        seq.finish_reason, seq.error = "error", reason
        self._finish(seq)
        return self._output(seq)

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
        self._finished_outputs.append(self._output(seq))
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
        manager, scheduler, c = self.block_manager, self.scheduler, self._counters
        return EngineStats(
            active_requests=len(scheduler.running), waiting_requests=len(scheduler.waiting),
            scheduled_requests=c.last_scheduled, context_requests=c.last_context,
            generation_requests=c.last_scheduled - c.last_context, max_kv_blocks=manager.num_blocks,
            free_kv_blocks=manager.num_free_blocks, used_kv_blocks=manager.num_used_blocks,
            reused_kv_blocks=manager.num_reused_blocks, tokens_per_block=manager.block_size, iteration=c.iteration,
            max_num_tokens=self.config.max_num_tokens, queue_capacity=self.config.max_queue_size,
            completed_requests=c.completed, cancelled_requests=c.cancelled,
            preempted_requests=scheduler.num_preemptions, evicted_kv_blocks=manager.num_evicted_blocks,
            scheduled_tokens=c.scheduled_tokens, prompt_tokens=c.prompt_tokens,
            generated_tokens=c.generated_tokens, reused_tokens=c.reused_tokens)

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
