"""Hermes benchmarks: the harness's own cost on the hot path, and the session stores.

The agent benchmark exists because users who drive thousands of concurrent conversations
against a local inference server (vLLM, SGLang, llama.cpp) hit the harness as the
bottleneck, not the model. It compares our agent with a raw HTTP client making the same
exchanges against a deterministic mock server, so what it reports is *overhead*: ratios and
differences, not absolute times, which move with the machine.

Layout:

* :mod:`bench.mock_server`: the mock OpenAI-compatible / Anthropic server (own process);
* :mod:`bench.runners`: one conversation, as our agent and as a raw client;
* :mod:`bench.worker`: one measured client process (one variant, all phases);
* :mod:`bench.stores`: SQLite/PostgreSQL append, FTS search and resume figures;
* :mod:`bench.report`: the table and the JSON;
* :mod:`bench.cli`: ``python -m bench`` (``make bench``), which interleaves it all.

See docs/performance.md for how to run it and how to read the table.
"""

from __future__ import annotations

RESULTS_SCHEMA = 1
"""Bumped when the JSON in bench/results/ changes shape, so old files are not misread."""
