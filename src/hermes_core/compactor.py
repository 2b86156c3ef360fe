"""Running a compression: the summariser call and the checks around it.

:mod:`hermes_core.compression` decides where to cut; this module asks the auxiliary model
for the summary, rebuilds the transcript and validates it. A failed summary aborts the
compression: there is no destructive fallback that would drop history without a summary.
"""

from __future__ import annotations

import logging

from hermes_core.compression import (
    CompressionSettings,
    apply_summary,
    estimate_tokens,
    plan_compression,
    summary_request_text,
    threshold_tokens,
)
from hermes_core.errors import ModelError
from hermes_core.invariants import ensure_valid
from hermes_core.messages import Message, UserMessage
from hermes_core.ports.llm import ChatModel, ModelRequest

__all__ = ["Compactor"]

log = logging.getLogger("hermes.compression")

_THINK_TAGS = ("<think>", "</think>")


class Compactor:
    """Compression state of one agent: settings, the running summary, first-pass flag."""

    def __init__(self, settings: CompressionSettings, summarizer: ChatModel) -> None:
        self.settings = settings
        self.summarizer = summarizer
        self.threshold = threshold_tokens(settings)
        self.previous_summary: str | None = None
        self.compactions = 0
        self.last_prompt_tokens = 0

    def due_chars(self, chars: int) -> bool:
        """True when the estimated (``chars`` / 4, kept current by the caller, so O(1) a
        round) or last reported prompt size passes the threshold."""
        if not self.settings.enabled:
            return False
        return max(-(-chars // 4), self.last_prompt_tokens) >= self.threshold

    async def compact(self, transcript: list[Message]) -> list[Message] | None:
        """The compacted transcript, or ``None`` when nothing can or should be cut."""
        plan = plan_compression(transcript, self.settings, first_pass=self.compactions == 0)
        if plan is None:
            return None
        budget = max(2000, min(estimate_tokens(plan.middle) // 5, 10_000))
        prompt = summary_request_text(plan.middle, self.previous_summary, budget)
        request = ModelRequest(
            messages=(UserMessage(content=prompt),),
            model=self.summarizer.model_name,
            max_tokens=budget * 2,
        )
        try:
            response = await self.summarizer.complete(request)
        except ModelError as exc:
            log.warning("compression aborted: the summariser failed (%s)", exc)
            return None
        summary = (response.message.content or "").strip()
        for tag in _THINK_TAGS:
            summary = summary.replace(tag, "")
        if not summary.strip():
            log.warning("compression aborted: the summariser returned nothing")
            return None
        compacted = apply_summary(plan, summary)
        ensure_valid(compacted)
        self.previous_summary = summary.strip()
        self.compactions += 1
        self.last_prompt_tokens = 0
        return compacted
