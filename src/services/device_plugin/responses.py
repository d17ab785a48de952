"""From the node Runtime's Allocate answer to kubelet's container response: the allow-list, the CDI names and the
device-list strategy, in that order (:class:`ResponseShaper`).

* Before the Runtime is asked (:meth:`ResponseShaper.names`): the plan's CDI names the node's spec resolves
  (:func:`.cdi.resolvable_names`), only with strategy ``cdi-cri``; with ``cdi-cri`` alone, a container CDI cannot
  serve is refused here (:func:`domain.device_plugin.device_list.check_cdi_only`), so nothing is allocated for it.
* After (:meth:`ResponseShaper.finish`): the Runtime's answer passes the allow-list
  (:mod:`domain.device_plugin.response_guard`) as the Runtime gave it, then the strategy shapes it
  (:func:`domain.device_plugin.device_list.container_response`; its ``/dev/null`` mounts are the plugin's own, never
  judged as the Runtime's). A refused answer is logged and counted (:attr:`ResponseShaper.refused_answers`) and
  raises; nothing of it reaches kubelet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from domain.device_plugin.device_list import (
    DeviceListError,
    DeviceListStrategies,
    DeviceListStrategy,
    check_cdi_only,
    container_response,
    default_strategies,
)
from domain.device_plugin.response_guard import ForbiddenResponseError, ResponseAllowList
from domain.runtime.types import ContainerAllocationRequest, ContainerAllocationResponse

from .cdi import resolvable_names

log = logging.getLogger(__name__)


class ResponseShaper:
    """Turns the Runtime's answers into kubelet's responses (module docstring).

    ``allowed``: what the Runtime's answers may mount (None: nothing but ``/dev/nvidia*`` nodes); ``cdi``: the CDI
    names the node's spec resolves now (None: no spec is kept); ``strategies``: the device-list strategies (None:
    ``envvar``, plus ``cdi-cri`` with ``cdi``). Raises ValueError for ``cdi-cri`` without ``cdi``.
    """

    def __init__(self, *, allowed: ResponseAllowList | None = None, cdi: Callable[[], Collection[str]] | None = None,
                 strategies: DeviceListStrategies | None = None) -> None:
        self.allowed = allowed or ResponseAllowList()
        self.cdi = cdi
        self.strategies = strategies or default_strategies(cdi=cdi is not None)
        if self.strategies.includes(DeviceListStrategy.CDI_CRI) and cdi is None:
            raise ValueError(f"device list strategy {self.strategies}: cdi-cri needs the node's CDI spec (cdi)")
        self.refused_answers = 0
        """Runtime answers refused (outside ``allowed``, or device IDs the strategy cannot pass)."""
        log.info("device list strategy: %s", self.strategies)

    def names(self, request: ContainerAllocationRequest) -> tuple[str, ...]:
        """The CDI names to return for ``request`` (module docstring); empty without ``cdi-cri``. Raises
        ``DeviceListError`` (``cdi-cri`` alone) or ``InvalidRequestError`` (a malformed GPU UUID)."""
        if self.cdi is None or not self.strategies.includes(DeviceListStrategy.CDI_CRI):
            return ()
        resolvable = self.cdi()
        check_cdi_only(request, resolvable, self.strategies)
        return resolvable_names(request, resolvable)

    def finish(self, answer: ContainerAllocationResponse, *, names: Collection[str],
               label: str) -> ContainerAllocationResponse:
        """Kubelet's response for the Runtime's ``answer`` to container ``label`` with CDI ``names`` (from
        :meth:`names`). Raises ``ForbiddenResponseError`` or ``DeviceListError``, counted and logged."""
        try:
            self.allowed.check(answer, label=label)
            return container_response(answer, strategies=self.strategies, cdi_names=names, label=label)
        except (ForbiddenResponseError, DeviceListError) as error:
            self.refused_answers += 1
            log.error("%s (refused Runtime answers: %d)", error, self.refused_answers)
            raise
