"""`trtkit bench`: a serving benchmark for Triton (gRPC) and the OpenAI-compatible gateway (HTTP).

GuideLLM's split: ``spec`` (what to run), ``workloads`` (what each request asks), ``profiles`` (when
requests go out), ``backends/`` (how they are sent and timed), ``engine_metrics`` (Triton's metrics on
the same clock), ``runner`` (a sweep), ``reconcile`` + ``aggregate`` (figures), ``outputs/`` (files,
plots, HTML, console), ``compare`` (two runs side by side), ``session`` (the whole run as one call).
"""
