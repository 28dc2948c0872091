"""The pixel bound: how finely a page may be drawn so that its bitmap holds at most
``max_pixels`` pixels (sides rounded up to whole pixels), at most at the resolution asked
and never below the least one that can still be read (``page_too_large`` then).

Every renderer takes its scale from :func:`fit_within`, so the bound holds at any size: a
page too large for the bound at a readable resolution is refused, never drawn at 1 dpi into
more pixels than the bound (or gigapixels). What is drawn is in points (1/72 inch) wide and
high; for an image, its pixels at its own resolution are points too (``px * 72 / dpi``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from docpipe.errors import UnreadableDocumentError

__all__ = ["POINTS_PER_INCH", "Fit", "fit_within"]

POINTS_PER_INCH = 72
# Each try below rounds the scale down this much until the whole-pixel sides fit.
_STEP_DOWN = 0.995


@dataclass(frozen=True)
class Fit:
    """A scale to draw at (pixels per point), the bitmap's sides, and whether the scale is
    below the resolution asked for."""

    scale: float
    width: int
    height: int
    reduced: bool

    @property
    def dpi(self) -> int:
        return int(self.scale * POINTS_PER_INCH)


def fit_within(
    width_pt: float,
    height_pt: float,
    *,
    dpi: float,
    max_pixels: int,
    min_dpi: float,
    what: str,
    setting: str = "DOCPIPE_MAX_PAGE_PIXELS",
) -> Fit:
    """The finest scale up to ``dpi`` at which ``what`` ("page 3") fits in ``max_pixels``;
    UnreadableDocumentError ``page_too_large`` when that is below ``min_dpi``, ``corrupt``
    when it has no size. ``setting`` names the bound in the message."""
    if not (_positive(width_pt) and _positive(height_pt) and _positive(width_pt * height_pt)):
        raise UnreadableDocumentError(
            f"{what} has no drawable size ({width_pt:g} x {height_pt:g} points)", kind="corrupt"
        )
    scale = dpi / POINTS_PER_INCH
    reduced = width_pt * scale * height_pt * scale > max_pixels
    if reduced:
        scale = math.sqrt(max_pixels / (width_pt * height_pt))
    while _pixels(width_pt, height_pt, scale) > max_pixels and scale * POINTS_PER_INCH >= min_dpi:
        scale *= _STEP_DOWN  # the bitmap's sides are whole pixels, rounded up
        reduced = True
    if scale * POINTS_PER_INCH < min_dpi:
        raise UnreadableDocumentError(
            f"{what} is {width_pt:.0f} x {height_pt:.0f} points: within {setting}="
            f"{max_pixels} pixels it would be drawn at {scale * POINTS_PER_INCH:.3g} dpi, below "
            f"the {min_dpi:g} dpi it needs to be read",
            kind="page_too_large",
        )
    return Fit(scale, math.ceil(width_pt * scale), math.ceil(height_pt * scale), reduced=reduced)


def _pixels(width_pt: float, height_pt: float, scale: float) -> int:
    return math.ceil(width_pt * scale) * math.ceil(height_pt * scale)


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0
