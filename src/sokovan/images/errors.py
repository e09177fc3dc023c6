"""The one error family of image building, so that the command can say what failed in one line."""

from __future__ import annotations


class ImagesError(RuntimeError):
    """Building or pushing the default images failed; the message says what and why."""
