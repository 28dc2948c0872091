"""Where words are on a page: boxes as (left, top, right, bottom), origin at the top left,
y growing downwards, as a page is seen upright."""

from __future__ import annotations

__all__ = ["Box", "turn_box"]

Box = tuple[float, float, float, float]


def turn_box(box: Box, size: tuple[float, float], degrees: int) -> Box:
    """``box`` on a page of ``size`` (width, height) as it is after the page is turned
    ``degrees`` clockwise (0, 90, 180 or 270)."""
    left, top, right, bottom = box
    width, height = size
    if degrees == 90:
        return (height - bottom, left, height - top, right)
    if degrees == 180:
        return (width - right, height - bottom, width - left, height - top)
    if degrees == 270:
        return (top, width - right, bottom, width - left)
    return box
