"""``entrypoints._shared.command``: the outline every component's ``main`` follows.

Parse → settings → run: ``--help`` returns 0 with no error line; a usage error, a :class:`SettingsError` or an
extra bad-input error is exit 2 with ONE ``<prog>: error: …`` line naming the field and value; :func:`failing`
maps expected errors to codes (innermost mapping wins, line breaks escaped); :func:`start` is ``cannot start: …``
exit 1; :func:`shutting_down` always shuts down; :func:`serve` runs an app until its stop event. Also: every
component's ``app.SettingsError`` is the shared class and every ``__main__`` exports the shared exit codes.
"""

from __future__ import annotations

import argparse
import importlib
import threading

import pytest

from entrypoints._shared.cli import Parser, UsageError
from entrypoints._shared.command import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    SettingsError,
    command,
    fail,
    failing,
    parse_settings,
    serve,
    shutting_down,
    start,
)

COMPONENTS = ("controller", "device_plugin", "exporter", "job_agent", "runtime", "scheduler", "simulate", "up")


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="ljrk demo")
    parser.add_argument("--port", type=int, required=True)
    return parser


def _settings(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise SettingsError(f"port={args.port}: must be 0..65535")
    return int(args.port)


def _demo(argv: list[str], run: object = None) -> int:
    return command("ljrk demo", argv, parser=_parser(), settings=_settings,
                   run=run if callable(run) else (lambda port: EXIT_OK))


def test_command_runs_with_the_parsed_settings_and_returns_runs_code() -> None:
    seen: list[int] = []

    def run(port: int) -> int:
        seen.append(port)
        return 7

    assert _demo(["--port", "8080"], run) == 7
    assert seen == [8080]


def test_help_returns_zero_without_an_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert _demo(["--help"]) == 0  # the commands' exit codes: 0 done, 1 failed, 2 bad command line
    out, err = capsys.readouterr()
    assert "--port" in out
    assert err == ""


def test_usage_error_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert _demo([]) == 2
    err = capsys.readouterr().err
    assert err == "ljrk demo: error: the following arguments are required: --port\n"


def test_settings_error_names_field_and_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert _demo(["--port", "70000"]) == EXIT_USAGE
    assert capsys.readouterr().err == "ljrk demo: error: port=70000: must be 0..65535\n"


def test_extra_bad_input_errors_are_exit_2_others_propagate(capsys: pytest.CaptureFixture[str]) -> None:
    def lookup(args: argparse.Namespace) -> int:
        raise KeyError(f"policy={args.port!r}: unknown")

    parser = _parser()
    assert command("ljrk demo", ["--port", "1"], parser=parser, settings=lookup, run=lambda _: 0,
                   errors=(KeyError,)) == EXIT_USAGE
    assert "ljrk demo: error: " in capsys.readouterr().err
    with pytest.raises(KeyError):
        command("ljrk demo", ["--port", "1"], parser=parser, settings=lookup, run=lambda _: 0)


def test_parse_settings_raises_command_error_with_code_and_message() -> None:
    with pytest.raises(CommandError) as caught:
        parse_settings(_parser(), ["--port", "-1"], _settings)
    assert caught.value.code == EXIT_USAGE
    assert str(caught.value.message) == "port=-1: must be 0..65535"
    assert isinstance(caught.value.__cause__, SettingsError)
    with pytest.raises(CommandError) as helped:
        parse_settings(_parser(), ["-h"], _settings)
    assert (helped.value.code, helped.value.message) == (EXIT_OK, None)


def test_failing_maps_listed_errors_with_prefix_and_suffix() -> None:
    with pytest.raises(CommandError) as caught, failing(OSError, code=EXIT_FAILED, prefix="--listen :80: ",
                                                        suffix="; try another port"):
        raise OSError("address in use")
    assert caught.value.code == EXIT_FAILED
    assert caught.value.message == "--listen :80: address in use; try another port"
    with pytest.raises(ValueError, match="not listed"), failing(OSError, code=EXIT_FAILED):
        raise ValueError("not listed")


def test_failing_nests_innermost_mapping_wins() -> None:
    with pytest.raises(CommandError) as caught, failing(Exception, code=EXIT_FAILED, prefix="cannot start: "), \
            failing(KeyError, code=EXIT_USAGE):
        raise KeyError("k")
    assert (caught.value.code, caught.value.message) == (EXIT_USAGE, "'k'")


def test_message_with_line_breaks_stays_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    def run(_: int) -> int:
        with failing(ValueError, code=EXIT_USAGE):
            raise ValueError("name='a\nb'")
        return EXIT_OK

    assert _demo(["--port", "1"], run) == EXIT_USAGE
    assert capsys.readouterr().err == "ljrk demo: error: name='a\\nb'\n"


def test_fail_prints_and_returns_the_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert fail("ljrk x", UsageError("bad\rthing"), 5) == 5
    assert capsys.readouterr().err == "ljrk x: error: bad\\rthing\n"


class _Container:
    def __init__(self, fail_init: bool = False) -> None:
        self.calls: list[str] = []
        self.fail_init = fail_init

    def init_resources(self) -> None:
        self.calls.append("init")
        if self.fail_init:
            raise RuntimeError("no kubeconfig")

    def shutdown_resources(self) -> None:
        self.calls.append("shutdown")


def test_start_inits_then_builds_and_failure_is_cannot_start() -> None:
    container = _Container()
    assert start(container, lambda: "app") == "app"
    assert container.calls == ["init"]
    broken = _Container(fail_init=True)
    with pytest.raises(CommandError) as caught, shutting_down(broken):
        start(broken, lambda: "never")
    assert (caught.value.code, caught.value.message) == (1, "cannot start: no kubeconfig")  # exit code 1: failed
    assert broken.calls == ["init", "shutdown"]


def test_shutting_down_runs_on_success_and_on_error() -> None:
    container = _Container()
    with shutting_down(container):
        pass
    with pytest.raises(ZeroDivisionError), shutting_down(container):
        _ = 1 / 0
    assert container.calls == ["shutdown", "shutdown"]


def test_serve_runs_until_the_given_stop_event_and_returns_the_result() -> None:
    class App:
        def run(self, stop: threading.Event) -> int:
            assert stop.wait(5)
            return 3

    stop = threading.Event()
    stop.set()
    assert serve(App(), stop) == 3


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_component_uses_the_shared_settings_error_and_codes(component: str) -> None:
    app = importlib.import_module(f"entrypoints.{component}.app")
    main = importlib.import_module(f"entrypoints.{component}.__main__")
    assert app.SettingsError is SettingsError
    if component != "up":  # up's codes live in its app (UpApp.run returns them)
        assert (main.EXIT_OK, main.EXIT_FAILED, main.EXIT_USAGE) == (EXIT_OK, EXIT_FAILED, EXIT_USAGE)
