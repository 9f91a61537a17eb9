"""Typed reads of one config.json's keys, each falling back to its transformers config class's
default (`throughput_schema.hf_model_types`), and the one-line error every refusal of the HF
import raises (`throughput_schema.hf_config`)."""

from __future__ import annotations

from typing import Any

from throughput_schema.hf_model_types import HEADS, ModelType


class HfConfigError(ValueError):
    """A config.json that cannot become a recipe; the message is one line naming the key."""


class Reader:
    """Typed reads of one config.json's keys, each falling back to its class default."""

    def __init__(self, config: dict[str, Any], kind: ModelType, src: str) -> None:
        self.config, self.kind, self.src = config, kind, src
        self.defaults: list[str] = []

    def _get(self, key: str) -> Any:
        if key in self.config:
            return self.config[key]
        value = self.kind.defaults[key]
        self.defaults.append(f"{key}={value}")
        return value

    def whole(self, key: str, *, none_means: int | None = None) -> int:
        """A positive whole number; `none_means` is what null stands for (num_key_value_heads)."""
        value = self._get(key)
        if value is None and none_means is not None:
            if key not in self.config:
                self.defaults[-1] = f"{key}={none_means} (num_attention_heads)"
            return none_means
        if isinstance(value, list):
            raise HfConfigError(f"{self.src}: {key} is a per-layer array; every layer must have the same shape")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise HfConfigError(f"{self.src}: {key} is {value!r}; it must be a positive whole number")
        return value

    def head_dim(self, hidden: int, heads: int) -> int:
        """Given, or the class's default: 128 for Qwen3, hidden_size // num_attention_heads elsewhere
        (where a null means the same)."""
        if self.config.get("head_dim") is not None or self.kind.defaults["head_dim"] != HEADS:
            return self.whole("head_dim")
        if hidden % heads:
            raise HfConfigError(
                f"{self.src}: head_dim is not given and hidden_size ({hidden}) is not a multiple of "
                f"num_attention_heads ({heads}); give head_dim"
            )
        self.defaults.append(f"head_dim={hidden // heads} ({HEADS})")
        return hidden // heads

    def text(self, key: str) -> str:
        value = self._get(key)
        if not isinstance(value, str):
            raise HfConfigError(f"{self.src}: {key} is {value!r}; expected a name")
        return value

    def number(self, key: str) -> float:
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise HfConfigError(f"{self.src}: {key} is {value!r}; it must be a positive number")
        return float(value)

    def flag(self, key: str) -> bool:
        value = self._get(key)
        if not isinstance(value, bool):
            raise HfConfigError(f"{self.src}: {key} is {value!r}; it must be true or false")
        return value
