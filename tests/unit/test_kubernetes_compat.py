"""``adapters.kubernetes.compat``: how merge patches and timeouts go out on each supported client shape.

Behaviours covered (the shapes are stand-in classes with the real generated signatures of 37.0.2, 28.1.0-35.0.0
and 36.0.3; the real clients run the contract suites in ``tests/integration/test_kubernetes_client_versions.py``):

* a ``patch_node`` with a ``_content_type`` parameter is KEYWORD, a ``**kwargs`` one beside a ``call_api`` taking
  ``response_type`` is HEADER, anything else (36's ``response_types_map``) is unsupported and named in the error;
* KEYWORD calls the generated method; HEADER calls ``call_api`` with the route, an explicit merge-patch
  Content-Type (strategic-merge-patch when asked), the response model and the timeout; an unsupported client
  raises before sending anything;
* timeouts: a float as is on KEYWORD; on HEADER whole seconds as an int, a fraction as ``(t, t)``;
* a client requiring urllib3 < 2 beside urllib3 2.x is a problem; the installed pair is not.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.kubernetes import compat


class Keyword:  # kubernetes 37: the generated method names _content_type
    def patch_node(self, name: str, body: object, _content_type: str | None = None) -> None: ...


class Legacy:  # kubernetes 28-35: **kwargs, and an ApiClient.call_api taking response_type
    def patch_node(self, name: str, body: object, **kwargs: Any) -> None: ...

    def call_api(self, resource_path: str, method: str, path_params: Any = None, query_params: Any = None,
                 header_params: Any = None, body: Any = None, response_type: Any = None, **rest: Any) -> None: ...


class Other:  # kubernetes 36: **kwargs, and call_api takes response_types_map instead
    def call_api(self, resource_path: str, method: str, response_types_map: Any = None, **rest: Any) -> None: ...


def test_the_style_follows_the_generated_signatures() -> None:
    assert compat.patch_style(Keyword, Other) == compat.KEYWORD
    assert compat.patch_style(Legacy, Legacy) == compat.HEADER
    assert compat.patch_style(Legacy, Other) is None


def test_an_unsupported_client_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "STYLE", None)
    monkeypatch.setattr(compat, "_installed", lambda name: {"kubernetes": "36.0.3", "urllib3": "2.8.0"}[name])
    with pytest.raises(RuntimeError, match=r"kubernetes client 36\.0\.3 is not supported .* 28-35 and >= 37"):
        compat.require_supported()
    sent: list[object] = []
    with pytest.raises(RuntimeError):
        compat.merge_patch(lambda: sent.append("keyword"), None, compat.NODE, {}, timeout=1, path={"name": "n"})
    assert sent == []


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def call_api(self, *args: Any, **kwargs: Any) -> str:
        self.calls.append((args, kwargs))
        return "model"


def test_keyword_clients_call_the_generated_method(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "STYLE", compat.KEYWORD)
    recorder = Recorder()
    assert compat.merge_patch(lambda: "generated", recorder, compat.NODE, {"a": 1}, timeout=2.5,
                              path={"name": "n"}) == "generated"
    assert recorder.calls == []
    assert compat.wire_timeout(2.5) == 2.5
    assert compat.wire_timeout(30.0) == 30.0


def test_header_clients_send_an_explicit_merge_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "STYLE", compat.HEADER)
    recorder = Recorder()
    body = {"status": {"conditions": None}}
    result = compat.merge_patch(lambda: pytest.fail("the generated method must not run"), recorder,
                                compat.JOB_STATUS, body, timeout=(0.2, 0.2), path={"name": "j", "namespace": "ns"})
    assert result == "model"
    ((args, kwargs),) = recorder.calls
    assert args == ("/apis/batch/v1/namespaces/{namespace}/jobs/{name}/status", "PATCH",
                    {"name": "j", "namespace": "ns"}, [],
                    {"Accept": "application/json", "Content-Type": "application/merge-patch+json"})
    assert kwargs == {"body": body, "response_type": "V1Job", "auth_settings": ["BearerToken"],
                      "_return_http_data_only": True, "_preload_content": True, "_request_timeout": (0.2, 0.2)}
    timeout = compat.wire_timeout(30.0)
    assert (timeout, type(timeout)) == (30, int)  # 28-35 drop a float timeout silently
    assert compat.wire_timeout(0.2) == (0.2, 0.2)


def test_header_clients_send_a_strategic_merge_patch_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "STYLE", compat.HEADER)
    recorder = Recorder()
    body = {"status": {"conditions": [{"type": "DisruptionTarget", "status": "True"}]}}
    compat.merge_patch(lambda: pytest.fail("the generated method must not run"), recorder, compat.POD_STATUS, body,
                       timeout=5, path={"name": "p", "namespace": "ns"}, content_type=compat.STRATEGIC_MERGE_PATCH)
    ((args, kwargs),) = recorder.calls
    assert args[0] == "/api/v1/namespaces/{namespace}/pods/{name}/status"
    assert args[4] == {"Accept": "application/json", "Content-Type": "application/strategic-merge-patch+json"}
    assert kwargs["body"] == body
    assert kwargs["response_type"] == "V1Pod"


def test_urllib3_2_beside_a_client_requiring_1_is_a_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    versions = {"kubernetes": "28.1.0", "urllib3": "2.8.0"}
    monkeypatch.setattr(compat, "_installed", versions.get)
    monkeypatch.setattr(compat.importlib.metadata, "requires",
                        lambda name: ["certifi>=14.05.14", "urllib3<2.0,>=1.24.2", "adal>=1.0.2; extra == 'adal'"])
    assert compat.client_problems(compat.HEADER) == [
        "installed kubernetes client 28.1.0 requires urllib3 < 2 but urllib3 2.8.0 is installed (a pair pip would "
        "not install, untested): run make, which reinstalls from pyproject.toml and lets pip pick urllib3"]
    versions["urllib3"] = "1.26.20"
    assert compat.client_problems(compat.HEADER) == []
    monkeypatch.setattr(compat.importlib.metadata, "requires", lambda name: ["urllib3!=2.6.0,>=1.24.2"])  # 35
    versions["urllib3"] = "2.8.0"
    assert compat.client_problems(compat.HEADER) == []


def test_the_installed_client_has_no_problem() -> None:
    assert compat.STYLE in (compat.KEYWORD, compat.HEADER)
    assert compat.client_problems() == []
