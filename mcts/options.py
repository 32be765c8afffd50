"""SearchConfig settings written as text: `head_until_gain=off,follow_gain=2`.

`kernelpro search --search` and `kernelpro bench --search` take this form, so that a search's knobs (the ones
benchmarks/mcts_landscapes.py measures on the replays) can be set on a real run. `parse_settings` checks every name against
`SearchConfig`'s fields and converts each value to its field's type; `configured` applies them. The strategy,
the seed and the budget have their own options (--strategy, --seed, --budget) and are refused here.
"""

from __future__ import annotations

import dataclasses
import math

from kernelpro.mcts.policies import SELECTION, WIDENING
from kernelpro.mcts.search import SearchConfig

OWN_OPTIONS = {"strategy": "--strategy", "seed": "--seed", "budget": "--budget"}
TRUE, FALSE = {"1", "true", "on", "yes"}, {"0", "false", "off", "no"}
CHOICES = {"selection": SELECTION, "widening": WIDENING}


class SettingsError(ValueError):
    """A --search text that names no SearchConfig field or gives a value its field cannot take."""


def tunable() -> dict[str, dataclasses.Field]:
    """The SearchConfig fields --search may set, by name."""
    return {f.name: f for f in dataclasses.fields(SearchConfig) if f.name not in OWN_OPTIONS}


def _value(name: str, kind: str, text: str):
    """`text` as a value of the field `name`, whose annotation is `kind` (the dataclass's, as a string)."""
    lowered = text.strip().lower()
    if name in CHOICES:
        if lowered not in CHOICES[name]:
            raise SettingsError(f"{name}={text}: one of {', '.join(sorted(CHOICES[name]))}")
        return lowered
    if kind == "bool":
        if lowered not in TRUE | FALSE:
            raise SettingsError(f"{name}={text}: on or off (also 1/0, true/false, yes/no)")
        return lowered in TRUE
    if "None" in kind and lowered == "none":
        return None
    try:
        number = int(lowered) if kind.startswith("int") else float(lowered)
    except ValueError:
        raise SettingsError(f"{name}={text}: {'a whole number' if kind.startswith('int') else 'a number'}"
                            f"{' or none' if 'None' in kind else ''}") from None
    if not math.isfinite(number) or number < 0:
        raise SettingsError(f"{name}={text}: a number of 0 or more")
    return number


def parse_settings(text: str) -> dict:
    """`NAME=VALUE,NAME=VALUE` -> {name: typed value}; '' -> {}. Raises SettingsError with what is wrong."""
    fields, settings = tunable(), {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, equals, value = (piece.strip() for piece in item.partition("="))
        if name in OWN_OPTIONS:
            raise SettingsError(f"{name}: set it with {OWN_OPTIONS[name]}, not --search")
        if name not in fields:
            raise SettingsError(f"{name!r} is no search setting; the settings are: {', '.join(sorted(fields))}")
        if not equals or not value:
            raise SettingsError(f"{item!r}: write NAME=VALUE, e.g. {name}={getattr(SearchConfig(), name)}")
        if name in settings:
            raise SettingsError(f"{name} is given twice")
        settings[name] = _value(name, str(fields[name].type), value)
    return settings


def configured(config: SearchConfig, text: str) -> SearchConfig:
    """`config` with the settings of `text` (parse_settings) in place of its own."""
    return dataclasses.replace(config, **parse_settings(text))


def describe(text: str) -> str:
    """The settings of `text` in a stable, canonical form (for run records and headers): 'a=1, b=off'."""
    def shown(value) -> str:
        return "on" if value is True else "off" if value is False else "none" if value is None else f"{value:g}" \
            if isinstance(value, float) else str(value)
    return ", ".join(f"{name}={shown(value)}" for name, value in parse_settings(text).items())
