"""What a model call cost, in USD: a price table per model, overridable in configuration.

Used by the `call_model` activity (never by the workflow): prices change, and a run's history
records the cost each call was charged, so replay never depends on today's table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from agentloop.events import Usage

PricePerMillion = tuple[float, float]
"""(input, output) USD per million tokens."""

DEFAULT_PRICES: dict[str, PricePerMillion] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
    "o3": (2.00, 8.00),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5": (1.25, 10.00),
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-opus-4": (15.00, 75.00),
}
"""Keys are model-name prefixes; the longest matching prefix wins."""


class PriceTable:
    def __init__(self, prices: Mapping[str, PricePerMillion] = DEFAULT_PRICES) -> None:
        self._prices = dict(prices)

    @classmethod
    def with_overrides(cls, path: str | None) -> PriceTable:
        """The defaults, with `{"model-prefix": [input, output], ...}` from a JSON file."""
        prices = dict(DEFAULT_PRICES)
        if path:
            loaded = json.loads(Path(path).read_text())
            prices.update({str(k): (float(v[0]), float(v[1])) for k, v in loaded.items()})
        return cls(prices)

    def price(self, model: str) -> PricePerMillion | None:
        matches = [prefix for prefix in self._prices if model.startswith(prefix)]
        return self._prices[max(matches, key=len)] if matches else None

    def unpriced_problem(self, model: str) -> str | None:
        """Why a `max_cost_usd` on `model` could never bind (None: the table prices it)."""
        if self.price(model) is not None:
            return None
        return (
            f"limits.max_cost_usd: model {model!r} has no price on this worker, so every call"
            " would cost 0 and the cap would never bind: give its price in the worker's"
            ' AGENTLOOP_PRICING_FILE, JSON {"model-prefix": [input, output]} in USD per'
            " million tokens (the longest matching prefix wins), or run without max_cost_usd"
        )

    def cost(self, model: str, usage: Usage) -> float:
        """0.0 for a model the table does not know (the run's `max_cost_usd` cannot bind)."""
        price = self.price(model)
        if price is None:
            return 0.0
        return (usage.input_tokens * price[0] + usage.output_tokens * price[1]) / 1_000_000
