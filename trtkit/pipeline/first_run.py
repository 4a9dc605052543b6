"""A first run converts the model's GGUF file once: say so in one line, and keep other libraries' progress bars
and warnings (transformers reading the GGUF) in a log file instead of on the console. The quickstart shows
this as a stage of its own; commands such as `trtkit tokens count` and `trtkit generate` use this instead."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from trtkit.config.paths import trtkit_home
from trtkit.config.schema import ModelConfig
from trtkit.pipeline.console import ThirdPartyOutput
from trtkit.sources.resolve import pending_conversion


@contextlib.contextmanager
def quiet_first_run(config: ModelConfig, say: Callable[[str], None]) -> Iterator[None]:
    """Around the code that resolves the config's model or tokenizer folder; ``say`` prints one line."""
    what = pending_conversion(config.model.tokenizer or config.model.source)
    if what is None:
        yield
        return
    capture = ThirdPartyOutput(trtkit_home() / "logs" / f"first-run-{time.strftime('%Y%m%d-%H%M%S')}.log")
    say(f"trtkit: first run: {what}, once (it takes up to a minute; other libraries' output: {capture.log_path})")
    with capture:
        yield
    say("trtkit: converted; later runs start at once")
