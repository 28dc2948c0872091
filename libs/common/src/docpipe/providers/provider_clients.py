"""Every configured provider's client behind one ``chat``: a request goes to the provider
that serves its model (ChatRequest.provider), each with its own base URL and key."""

from __future__ import annotations

import httpx

from docpipe.provider_specs import ProviderTable
from docpipe.providers.client import ChatRequest, Completion, LLMClient

__all__ = ["ProviderClients"]


class ProviderClients:
    def __init__(
        self,
        table: ProviderTable,
        *,
        timeout_s: float,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._clients = {
            p.name: LLMClient(
                base_url=p.base_url,
                api_key=p.api_key.get_secret_value(),
                timeout_s=timeout_s,
                transport=transport,
            )
            for p in table.providers
        }

    def chat(self, request: ChatRequest) -> Completion:
        """The completion from the provider named in ``request``."""
        return self._clients[request.provider].chat(request)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
