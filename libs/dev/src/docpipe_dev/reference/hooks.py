"""MkDocs hooks (``hooks:`` in mkdocs.yml): the generated reference parts go into the pages
that ask for them, and the OpenAPI document is published beside the HTTP API page."""

from __future__ import annotations

import json
import re
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from docpipe_dev.reference import render
from docpipe_dev.reference.http_api import openapi_document

__all__ = ["on_files", "on_page_markdown"]

MARKER = re.compile(r"<!-- reference: ([a-z-]+)(?: (\S+))? -->")


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    document = json.dumps(openapi_document(), indent=2)
    files.append(File.generated(config, "reference/openapi.json", content=document))
    return files


def on_page_markdown(markdown: str, **_: Any) -> str:
    return MARKER.sub(lambda found: render(found[1], found[2]), markdown)
