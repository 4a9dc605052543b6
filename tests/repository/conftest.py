"""The repository tests' helpers (echo_model.py, live_client.py, tokenizers_for_tests.py) import by their bare names
here; other folders import them as ``tests.repository.*``. The tokenizer fixtures and the shared echo-model server
`live` are in tests/conftest.py."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
