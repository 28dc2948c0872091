"""The web pages for the people who use docpipe, served by the API under ``/ui``."""

from docpipe_api.ui.app import create_ui

__all__ = ["create_ui"]
