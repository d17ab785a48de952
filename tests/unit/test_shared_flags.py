"""``entrypoints._shared.flags``: one table per component builds its parser and its settings."""

from __future__ import annotations

import attrs
import pytest

from entrypoints._shared.cli import UsageError
from entrypoints._shared.flags import HIDDEN, Cli, cli, flag


@attrs.frozen
class Settings:
    name: str
    count_s: float
    mode: str | None = None
    extra: str = ""


def table() -> Cli[Settings]:
    return cli(
        "ljrk demo", "A demo.", Settings,
        flag("--name", env="DEMO_NAME", default="plain", metavar="NAME", help="the name"),
        flag("--count", setting="count_s", type=float, default=1.0, convert=lambda v: v * 2, help="a count"),
        flag("--fast", setting="mode", group="mode", action="store_const", const="fast", help="fast"),
        flag("--slow", setting=None, group="mode", action="store_true", help="slow"),
        flag("--secret", setting=None, default="", help=HIDDEN),
        derived=lambda args: {"extra": "slow" if args.slow else ""},
    )


def test_the_table_gives_the_parser_its_flags_in_order_and_hides_hidden_ones() -> None:
    text = table().parser().format_help()
    assert text.startswith("usage: ljrk demo [-h] [--name NAME] [--count COUNT] [--fast | --slow]")
    assert text.index("--name") < text.index("--count") < text.index("--fast") < text.index("--slow")
    assert "--secret" not in text


def test_settings_take_each_flags_setting_through_its_conversion_and_the_derived_ones() -> None:
    demo = table()
    settings = demo.settings_from(demo.parser("x").parse_args(["--count", "3", "--slow"]))
    assert settings == Settings(name="plain", count_s=6.0, mode=None, extra="slow")


def test_an_env_default_is_read_when_the_parser_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    demo = table()
    monkeypatch.setenv("DEMO_NAME", "from-env")
    assert demo.parser().parse_args([]).name == "from-env"
    assert demo.parser().parse_args(["--name", "given"]).name == "given"


def test_flags_of_one_group_exclude_each_other() -> None:
    with pytest.raises(UsageError, match="not allowed with argument"):
        table().parser().parse_args(["--fast", "--slow"])
